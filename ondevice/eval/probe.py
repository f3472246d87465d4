"""SentEval-style linear probes: standardized features -> logistic regression (scikit-learn).

Protocol (fixed so runs are comparable and each probe takes seconds):
- features: float vectors as they are; packed codes unpacked to ±1 floats; then standardized (mean 0, var 1,
  fitted on the training part only);
- L2-regularized logistic regression (lbfgs, multinomial for TREC), inverse strength C from the grid `C_GRID`;
- k-fold tasks (MR, CR, SUBJ, MPQA): stratified 10-fold CV, shuffled with the seed; C is picked on the first
  fold's training part with a 10% stratified hold-out, then used for all 10 folds; score = mean test accuracy;
- split tasks (SST-2, TREC): C picked on the dev split (SST-2) or a 10% stratified hold-out of train (TREC,
  which has no dev split), the model refit on all of train, scored on test.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from ondevice._deps import require
from ondevice.bits import unpack
from ondevice.eval.metrics import accuracy, is_codes

C_GRID = (0.01, 0.1, 1.0)
MAX_ITER = 300  # lbfgs stops earlier on most probes; a capped fit is reported as is


def probe_features(x: np.ndarray, bits: int | None = None) -> np.ndarray:
    """float32 features for a probe: floats unchanged, packed codes as ±1."""
    if is_codes(x):
        b = unpack(np.asarray(x), bits if bits is not None else x.shape[1] * 8)
        return b.astype(np.float32) * 2.0 - 1.0
    return np.asarray(x, dtype=np.float32)


def _fit_score(xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, yte: np.ndarray, c: float, seed: int) -> float:
    """Test accuracy of a logistic regression fitted on standardized training features."""
    skl_lm = require("sklearn.linear_model", "eval")
    mean = xtr.mean(axis=0)
    std = xtr.std(axis=0)
    std[std == 0] = 1.0
    clf = skl_lm.LogisticRegression(C=c, max_iter=MAX_ITER, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=require("sklearn.exceptions", "eval").ConvergenceWarning)
        clf.fit((xtr - mean) / std, ytr)
    return accuracy(yte, clf.predict((xte - mean) / std))


def _holdout(y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (train, held-out) index split."""
    ms = require("sklearn.model_selection", "eval")
    splitter = ms.StratifiedShuffleSplit(n_splits=1, test_size=fraction, random_state=seed)
    return next(splitter.split(np.zeros(len(y)), y))


def select_c(x: np.ndarray, y: np.ndarray, xval: np.ndarray, yval: np.ndarray, seed: int) -> tuple[float, dict]:
    """The C of `C_GRID` with the best validation accuracy (first of the best on ties) and every score."""
    scores = {c: _fit_score(x, y, xval, yval, c, seed) for c in C_GRID}
    best = max(C_GRID, key=lambda c: (scores[c], -C_GRID.index(c)))
    return best, {str(c): round(100 * s, 2) for c, s in scores.items()}


def _one_blas_thread():
    """Context limiting BLAS to one thread: lbfgs on these small problems is latency-bound, and
    multi-threaded BLAS on a busy 2-core machine ran 50x slower (TREC: 9.5 s vs 0.17 s per fit)."""
    return require("threadpoolctl", "eval").threadpool_limits(limits=1)


def kfold_accuracy(x: np.ndarray, y: np.ndarray, seed: int = 0, folds: int = 10) -> dict:
    """Mean 10-fold CV test accuracy x100 (protocol in the module docstring)."""
    with _one_blas_thread():
        return _kfold_accuracy(x, y, seed, folds)


def _kfold_accuracy(x: np.ndarray, y: np.ndarray, seed: int, folds: int) -> dict:
    ms = require("sklearn.model_selection", "eval")
    t0 = time.perf_counter()
    x = np.asarray(x, dtype=np.float32)
    splits = list(ms.StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))
    tr0 = splits[0][0]
    fit, val = _holdout(y[tr0], 0.1, seed)
    c, grid = select_c(x[tr0][fit], y[tr0][fit], x[tr0][val], y[tr0][val], seed)
    accs = [_fit_score(x[tr], y[tr], x[te], y[te], c, seed) for tr, te in splits]
    return {"acc": round(100 * float(np.mean(accs)), 2), "acc_std": round(100 * float(np.std(accs)), 2),
            "C": c, "val_acc_by_C": grid, "n": len(y), "seconds": round(time.perf_counter() - t0, 2)}


def split_accuracy(xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, yte: np.ndarray,
                   xdev: np.ndarray | None = None, ydev: np.ndarray | None = None, seed: int = 0) -> dict:
    """Test accuracy x100 of a probe trained on train, C picked on dev (or a 10% hold-out of train)."""
    with _one_blas_thread():
        return _split_accuracy(xtr, ytr, xte, yte, xdev, ydev, seed)


def _split_accuracy(xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, yte: np.ndarray,
                    xdev: np.ndarray | None, ydev: np.ndarray | None, seed: int) -> dict:
    t0 = time.perf_counter()
    xtr = np.asarray(xtr, dtype=np.float32)
    if xdev is None or ydev is None:
        fit, val = _holdout(ytr, 0.1, seed)
        c, grid = select_c(xtr[fit], ytr[fit], xtr[val], ytr[val], seed)
    else:
        c, grid = select_c(xtr, ytr, np.asarray(xdev, dtype=np.float32), ydev, seed)
    acc = _fit_score(xtr, ytr, np.asarray(xte, dtype=np.float32), yte, c, seed)
    return {"acc": round(100 * acc, 2), "C": c, "val_acc_by_C": grid, "n_train": len(ytr),
            "n_test": len(yte), "seconds": round(time.perf_counter() - t0, 2)}
