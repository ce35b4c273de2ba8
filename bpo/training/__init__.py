"""Training: a config in, a run directory out.

* ``run(cfg, ...) -> RunOutput`` (``bpo.training.run``): validate (``run_validated`` skips it), build the
  traced hyperparameters, and run every seed (one program, checkpointed segments, or the host runner);
* ``write(out, run_dir) -> summary`` (``bpo.training.summary``): the run directory;
* ``bpo.training.kinds``: what differs between episodic and on-policy runs.
"""

from bpo.training.kinds import default_checkpoint_every, progress_totals
from bpo.training.run import make_train, run, run_validated
from bpo.training.run_output import RunOutput
from bpo.training.summary import summarize, write

__all__ = ["RunOutput", "default_checkpoint_every", "make_train", "progress_totals", "run", "run_validated",
           "summarize", "write"]
