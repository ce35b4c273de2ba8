"""``--quick``: the quick tier of docs/testing.md, a shorthand for ``-m QUICK`` (and-ed with any ``-m``)."""

QUICK = "not slow and not mujoco and not mjx and not slurm"
"""No test over ~30 s, none that steps MuJoCo or compiles MJX physics, no Slurm cluster."""


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true", help=f"run the quick tier only: -m '{QUICK}'")


def pytest_configure(config):
    if config.getoption("--quick"):
        given = config.option.markexpr
        config.option.markexpr = f"({given}) and ({QUICK})" if given else QUICK
