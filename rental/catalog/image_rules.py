"""Does an image run on an offering's hosts? Pure functions, no database.

An image built for CUDA X needs a driver that supports CUDA X (and, where the image
records it, at least the driver version its CUDA was built against). An offering
records the driver its hosts run and the highest CUDA that driver supports. A value
that is not recorded is not checked: only a known conflict is a conflict.
"""

import re
from dataclasses import dataclass

_NUMBER = re.compile(r"\d+")


def version_key(text: str) -> tuple[int, ...] | None:
    """'12.4' → (12, 4); '550.54.15' → (550, 54, 15); None for text with no number."""
    numbers = _NUMBER.findall(text or "")
    if not numbers:
        return None
    parts = [int(n) for n in numbers]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _older(have: str, need: str) -> bool:
    have_key, need_key = version_key(have), version_key(need)
    return have_key is not None and need_key is not None and have_key < need_key


@dataclass(frozen=True)
class DriverConflict:
    """Why the image does not run there, with both versions named."""

    kind: str  # "cuda" or "driver"
    image_needs: str
    offering_has: str


def driver_conflict(
    *,
    image_cuda: str,
    image_driver: str,
    offering_max_cuda: str,
    offering_driver: str,
) -> DriverConflict | None:
    """The conflict between an image and an offering, or None when it runs (or when
    the versions needed to tell are not recorded)."""
    if _older(offering_max_cuda, image_cuda):
        return DriverConflict("cuda", image_cuda, offering_max_cuda)
    if _older(offering_driver, image_driver):
        return DriverConflict("driver", image_driver, offering_driver)
    return None


_FRAMEWORK = re.compile(r"^\s*([A-Za-z][\w .+-]*?)\s+v?(\d[\w.+-]*)\s*$")


def parse_frameworks(text: str) -> dict[str, str]:
    """'PyTorch 2.5, JupyterLab 4.2' → {"PyTorch": "2.5", "JupyterLab": "4.2"}; parts
    without a version are left out."""
    versions = {}
    for part in (text or "").split(","):
        match = _FRAMEWORK.match(part)
        if match:
            versions[match.group(1)] = match.group(2)
    return versions
