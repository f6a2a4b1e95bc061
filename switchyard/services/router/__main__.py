from switchyard.libs.bus import run_service
from switchyard.services.router.service import setup
from switchyard.services.router.settings import RouterSettings

if __name__ == "__main__":
    run_service("router", RouterSettings(), setup)
