"""The data piece of every pair run's config: which task, the shared data folder, its carved splits, a subset."""

from __future__ import annotations

from dataclasses import dataclass

from ondevice.configs import Check
from ondevice.eval.pair_tasks import task_spec


@dataclass
class PairSource:
    """The pairs a run trains and is judged on: `task`'s train and dev splits in `data`."""

    task: str = ""
    data: str = ""  # shared data folder
    split_seed: int = 0  # seed of the carved dev splits (SICK, MRPC) and the QQP split
    max_train_pairs: int | None = None  # train on a seeded subset of this many pairs

    def checks(self) -> list[Check]:
        """A known task (else its own one-line error) and a subset of at least 2 pairs."""
        task_spec(self.task)
        return [(self.max_train_pairs is None or self.max_train_pairs >= 2, "{max_train_pairs} must be >= 2")]
