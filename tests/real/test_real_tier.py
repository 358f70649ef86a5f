"""The real tier (``make test-real``): the operator's identities on Gemma 3 270M's trained weights, from the
checkpoint ``make real`` installed, assembled and converted. Without it, each test skips in one line naming what is
missing (the package, or the conversion)."""

from __future__ import annotations

import io

import pytest

from kamera.real import package
from kamera.real.convert import converted

pytestmark = [pytest.mark.real, pytest.mark.full]


@pytest.fixture(scope="module")
def hub():
    if not package.installed():
        pytest.skip(f"{package.PACKAGE}=={package.VERSION} is not installed in {package.site_dir()} (make real)")
    path, sha = package.assemble()
    out = package.cache_root() / package.KEY / "hub"
    if not converted(out, sha):
        pytest.skip(f"{path.name} is not converted to {out} yet (make real)")
    return out


def test_the_identities_hold_on_the_real_weights(hub):
    log = io.StringIO()
    from kamera.real import identities

    assert identities.run(str(hub), 2, "none", out=log), log.getvalue()
    assert "relocation" in log.getvalue() and "sliding" in log.getvalue()


def test_the_gguf_itself_loads_by_path_as_gemma3_text(hub):
    """``model=hf model.path=<file>.gguf`` takes the GGUF of a Gemma 3 text decoder (dequantised into
    Gemma3ForCausalLM): its entry is the family's, the same as the converted directory's."""
    from kamera.models.checkpoints import own_entry

    gguf, _ = package.assemble()
    e = own_entry("hf", gguf)
    assert e.family == "gemma3_text" and e.model_class == "Gemma3ForCausalLM"
    assert own_entry("hf", hub).adapter is e.adapter
