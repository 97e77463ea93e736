"""What a person sees of an HTML page: Debian's headless Chromium prints it to PDF and the
PDF's text is read back (pypdf), so SVG labels, table cells and anything CSS hides count
only as rendered."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pypdf import PdfReader

#: the flags headless Chromium needs on a closed network, as root, without a GPU
_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--no-pdf-header-footer")


def rendered_text(page: Path, work: Path) -> str:
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: `make setup` installs Debian's chromium"
    pdf = work / (page.stem + ".pdf")
    done = subprocess.run([chromium, *_FLAGS, f"--user-data-dir={work / 'chromium-profile'}",
                           f"--print-to-pdf={pdf}", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and pdf.exists(), f"chromium could not render {page}: {done.stderr[-2000:]}"
    return "\n".join(p.extract_text() or "" for p in PdfReader(str(pdf)).pages)
