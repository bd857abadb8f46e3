"""Backend plugins as a vendor's installed distribution leaves them: a folder with the vendor's
modules and a ``.dist-info`` whose entry points importlib.metadata finds once the folder is on
PYTHONPATH (real metadata discovery, in a child process)."""
from __future__ import annotations

from pathlib import Path


def vendor_site(root: Path, dist: str, entries: dict[str, str], modules: dict[str, str]) -> Path:
    """``root/site-DIST``: distribution ``dist`` registering ``entries`` (name -> "module:Class")
    in the ``accel.backends`` group, beside ``modules`` (module name -> source)."""
    site = root / f"site-{dist}"
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[accel.backends]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()))
    for name, source in modules.items():
        (site / f"{name}.py").write_text(source)
    return site
