"""The quality floor: how much of the baseline's image a faster configuration must keep, its defaults and
its check of a measured record. The auto-tuner searches above it, the cards' search uses its defaults, and
every face (form, client, MCP tool, argv) builds it by name here, numbers possibly as text; its defaults
import without torch (the CLI's --help shows them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from studio import checks


@dataclass(frozen=True, kw_only=True)
class Floor:
    """The quality a configuration must keep against the baseline's image: PSNR (dB) and SSIM of its pixels,
    and for the bundled model the prompt fidelity (or prompt score) it may lose."""

    min_psnr: float = 30.0
    min_ssim: float = 0.95
    fidelity_drop: float = 0.03

    def __post_init__(self) -> None:
        for name, low, high in (("min_psnr", 0, 200), ("min_ssim", -1, 1), ("fidelity_drop", 0, 1)):
            value = checks.number(f"The quality floor's {name}", getattr(self, name), low, high)
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Floor:
        """The floor from a face's values by name; a value left empty (None) keeps its default."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if values.get(f.name) is not None})

    def check(self, record: dict[str, Any], baseline_fidelity: float | None) -> str | None:
        """Why `record` misses the floor, or None when it meets it. A configuration whose image follows
        another path (`JUDGED_BY_PROMPT`: fewer steps, another decoder) is judged by how well it shows the
        prompt, not by its pixels' distance from the baseline's: its prompt score may drop at most
        `fidelity_drop`."""
        from studio.optimizations.step_lever import JUDGED_BY_PROMPT  # torch: imported when first judged

        if JUDGED_BY_PROMPT & set(record["applied"]):
            change = record.get("prompt_score_change")
            if change is None and record.get("fidelity") is None:
                return f"no prompt score to judge it by ({record.get('prompt_score_note') or 'none'})"
            if change is not None and change < -100 * self.fidelity_drop - 1e-9:
                most = f"at most -{100 * self.fidelity_drop:g}"
                return f"prompt score {change:+.1f} points against the baseline's ({most})"
        elif record["psnr_db"] is not None and record["psnr_db"] < self.min_psnr:
            return f"PSNR {record['psnr_db']:.1f} dB < {self.min_psnr:g}"
        if (
            not JUDGED_BY_PROMPT & set(record["applied"])
            and record["ssim"] is not None
            and record["ssim"] < self.min_ssim
        ):
            return f"SSIM {record['ssim']:.3f} < {self.min_ssim:g}"
        if (
            baseline_fidelity is not None
            and record["fidelity"] is not None
            and record["fidelity"] < baseline_fidelity - self.fidelity_drop - 1e-9
        ):
            return (
                f"prompt fidelity {record['fidelity']:.0%} < baseline {baseline_fidelity:.0%}"
                f" - {self.fidelity_drop:.0%}"
            )
