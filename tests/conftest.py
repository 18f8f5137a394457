import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Keep test runs' workload cache out of the user's home.
os.environ.setdefault("DSE_CACHE_DIR", str(ROOT / ".pytest_cache" / "dse-cache"))

#: Where scripts/test-services.sh writes the URL of the PostgreSQL server it starts.
SERVICES_ENV = Path("/tmp/dse-test-services.env")


def _find_postgres() -> None:
    """Set DSE_TEST_POSTGRES_URL from scripts/test-services.sh's file when the environment does
    not, so `bash scripts/test.sh` runs the PostgreSQL tests wherever that server runs."""
    if os.environ.get("DSE_TEST_POSTGRES_URL"):
        return
    try:
        text = SERVICES_ENV.read_text()
    except OSError:
        return
    m = re.search(r"DSE_TEST_POSTGRES_URL=(\S+)", text)
    if m:
        os.environ["DSE_TEST_POSTGRES_URL"] = m.group(1).strip("'\"")


_find_postgres()
