import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Keep test runs' workload cache out of the user's home.
os.environ.setdefault("DSE_CACHE_DIR", str(ROOT / ".pytest_cache" / "dse-cache"))
