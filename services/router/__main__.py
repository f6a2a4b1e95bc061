from libs.bus import run_service
from services.router.service import setup
from services.router.settings import RouterSettings

if __name__ == "__main__":
    run_service("router", RouterSettings(), setup)
