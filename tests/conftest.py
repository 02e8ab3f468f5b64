import functools
import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

# CI: enough examples to mean something, no wall-clock deadline (CI machines are slow and
# shared). `HYPOTHESIS_PROFILE=long` is the documented long run (docs/testing.md).
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", deadline=None, max_examples=100_000, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


@functools.lru_cache(maxsize=512)
def compile_cached(source: str):
    from heatc.compile import compile_source

    return compile_source(source, "generated.heat")
