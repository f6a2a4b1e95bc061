"""The PDF text extractor as a process of its own: `python -m switchyard.services.gateway.product.pdf_worker LIMITS_JSON`,
the PDF on stdin, one JSON line on stdout: `{"text": ...}` or `{"error": "too_large"|"bad", "message": ...}`.

A hostile PDF is cheap to make and dear to read (9,856 bytes once inflated to 6.3 MB of text
operators held the gateway 31 CPU-s). Here the parse counts what it decompresses and the pages it reads,
and the kernel holds it to its CPU seconds and address space, while the gateway (pdf.py) kills it at its
wall-clock limit: whatever a file does, it does it outside the gateway's event loop and is stopped.
"""

from __future__ import annotations

import io
import json
import math
import resource
import sys
from typing import Any


class TooLarge(Exception):
    """A limit was reached; the message names it."""


def _content_bytes(page: Any) -> int:
    contents = page.get_contents()
    return len(contents.get_data()) if contents is not None else 0


def _over_content(limit: int) -> str:
    return f"the PDF's content decompresses to over {limit} bytes; uploads are limited to {limit} bytes of decompressed content"


def extract(data: bytes, max_pages: int, max_content_bytes: int) -> str:
    from pypdf import PdfReader, overwrite_configuration
    from pypdf.errors import LimitReachedError

    # No one stream may inflate past the document's whole budget (pypdf's own default is 75 MB).
    overwrite_configuration(zlib_maximum_output_length=max_content_bytes)
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = len(reader.pages)
        if pages > max_pages:
            raise TooLarge(f"the PDF has {pages} pages; uploads are limited to {max_pages} pages")
        total = 0
        texts = []
        for page in reader.pages:
            # The content is decompressed once here and kept on the page, so extract_text reads it again for free.
            total += _content_bytes(page)
            if total > max_content_bytes:
                raise TooLarge(_over_content(max_content_bytes))
            texts.append(page.extract_text() or "")
    except LimitReachedError as e:
        what = _over_content(max_content_bytes) if "decompress" in str(e) else "the PDF exceeds a parsing limit"
        raise TooLarge(f"{what} ({e})") from e
    return "\n\n".join(t.strip() for t in texts if t.strip())


def main(argv: list[str]) -> int:
    limits = json.loads(argv[1])
    cpu_s = math.ceil(limits["cpu_s"])
    # Soft limit first (SIGXCPU, the default action ends the process), hard one a second later.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    data = sys.stdin.buffer.read()
    out: dict[str, str]
    try:
        out = {"text": extract(data, limits["max_pages"], limits["max_content_bytes"])}
    except TooLarge as e:
        out = {"error": "too_large", "message": str(e)}
    except MemoryError:
        out = {"error": "too_large", "message": f"parsing the PDF needs over {limits['memory_bytes']} bytes of memory"}
    except Exception as e:  # a malformed PDF fails in many ways (pypdf's own errors, ValueError, KeyError ...)
        out = {"error": "bad", "message": f"cannot read this PDF: {type(e).__name__}: {str(e)[:300]}"}
    sys.stdout.write(json.dumps(out))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
