"""Session fixtures of the shaped-checkpoint tests (``tests/shaped_fixtures.py``; helpers in ``shaped_support.py``)."""

from shaped_fixtures import shaped_cache, shaped_root  # noqa: F401  (fixtures)
