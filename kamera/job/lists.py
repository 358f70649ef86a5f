"""The plugin lists a job config has, and the one check both item shapes make of the lists they do not read."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

PLUGIN_KINDS = ("arm", "probe", "window_probe", "policy")  # cfg.arms, .probes, .window_probes, .policies (conf/<kind>)


def list_key(kind: str) -> str:
    """The config key of a plugin kind's list: ``arms``, ``probes``, ``window_probes``, ``policies``."""
    return "policies" if kind == "policy" else f"{kind}s"


def unread_lists(cfg: DictConfig, kinds: tuple[str, ...], why: str) -> list[str]:
    """One line for each plugin list not among ``kinds`` (the lists the job's shape reads) that is not empty."""
    out = []
    for kind in PLUGIN_KINDS:
        listed = cfg.get(list_key(kind))
        if kind not in kinds and listed:
            plain = OmegaConf.to_container(listed, resolve=True) if OmegaConf.is_config(listed) else listed
            out.append(f"{list_key(kind)}={plain!r}: {why}; set {list_key(kind)}=[]")
    return out
