"""Training: a config in, a run directory out.

* ``run(cfg, ...) -> RunOutput`` (``bpo.training.run``): validate (``run_validated`` skips it), build the
  traced hyperparameters, and run every seed (one program, checkpointed segments, or the host runner);
* ``write(out, run_dir) -> summary`` (``bpo.training.summary``): the run directory;
* ``bpo.training.kinds``: what differs between episodic and on-policy runs;
* ``run_rows(cfgs) -> [RunOutput]`` (``bpo.training.rows``): configs that differ only in traced
  hyperparameters, trained as one program.
"""

from bpo.training.kinds import default_checkpoint_every, progress_totals
from bpo.training.rows import check_rows, program_key, run_rows
from bpo.training.run import make_train, run, run_validated
from bpo.training.run_output import RunOutput
from bpo.training.summary import summarize, write

__all__ = ["RunOutput", "check_rows", "default_checkpoint_every", "make_train", "program_key", "progress_totals", "run",
           "run_rows", "run_validated", "summarize", "write"]
