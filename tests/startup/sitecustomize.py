"""Run at the start of every Python process the suite starts (tests/conftest.py puts this folder on
PYTHONPATH): the suite's one-build-per-graph compiled packages (package_memo)."""

import package_memo

package_memo.install()
