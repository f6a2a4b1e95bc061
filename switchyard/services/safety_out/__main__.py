import os

# Before numpy loads: its OpenBLAS runs the classifier's head (a small matmul, on the classifier's thread)
# on one thread. With a second one, that thread busy-waits after every pass, about as much CPU as the whole
# token path outside the classifier (docs/benchmarks.md); the classifier's threads are `classifier_threads`.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from switchyard.libs.bus import run_service
from switchyard.services.safety_out.service import setup
from switchyard.services.safety_out.settings import SafetyOutSettings

if __name__ == "__main__":
    run_service("safety_out", SafetyOutSettings(), setup)
