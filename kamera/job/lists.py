"""The plugin lists a job config has, and the one check both item shapes make of the lists they do not read."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

PLUGIN_KINDS = ("arm", "probe", "window_probe")  # cfg.arms, cfg.probes, cfg.window_probes (conf/<kind>)


def unread_lists(cfg: DictConfig, kinds: tuple[str, ...], why: str) -> list[str]:
    """One line for each plugin list not among ``kinds`` (the lists the job's shape reads) that is not empty."""
    out = []
    for kind in PLUGIN_KINDS:
        listed = cfg.get(f"{kind}s")
        if kind not in kinds and listed:
            plain = OmegaConf.to_container(listed, resolve=True) if OmegaConf.is_config(listed) else listed
            out.append(f"{kind}s={plain!r}: {why}; set {kind}s=[]")
    return out
