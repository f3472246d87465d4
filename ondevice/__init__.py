"""ondevice: distill a BERT-family sentence encoder into a tiny BiLSTM, binarize and search its embeddings.

The top-level import is light (numpy only); torch-backed parts load on first use.
"""

from ondevice.errors import OndeviceError

__version__ = "0.1.0"
__all__ = ["OndeviceError", "__version__", "load"]


def load(name: str = "default", threads: int = 0):
    """The pretrained bundle shipped in the package (`ondevice.runtime.Bundle`): `ondevice.load().encode(texts)`;
    its duplicate-question head: `ondevice.load().pair_scores(questions_a, questions_b)`."""
    # loaded on use: `import ondevice` stays light
    from ondevice.pretrained import pretrained_path
    from ondevice.runtime import Bundle

    return Bundle.load(pretrained_path(name), threads=threads)
