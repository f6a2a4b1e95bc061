"""The pipeline's services: each runs as ``python -m switchyard.services.<name>``.

Before any service loads numpy: its OpenBLAS runs on one thread. The services' numpy products are small (a
classifier head, a planner's intent scores, retrieval's similarities), and with a second OpenBLAS thread
that thread busy-waits after every one of them: in safety_out about as much CPU as its whole token path
outside the classifier (docs/benchmarks.md). The model passes have their own thread settings; an operator's
OPENBLAS_NUM_THREADS still wins.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
