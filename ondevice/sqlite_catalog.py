"""Catalogs in SQLite: codes, optional int8 vectors, ids, text and attributes in one database file an app already has.

    from ondevice.sqlite_catalog import Catalog
    cat = Catalog.create("notes.db", bits=2048, vector_dim=384)
    cat.add(codes, ids, vectors=unit_floats, texts=texts, tags=masks, categories=folders)  # one transaction
    index = cat.to_index()                       # a HammingIndex (with int8 vectors and attributes) for fast search
    cat.remove([7]); cat.update([3], codes3, texts=["new text"])
    cat.refresh(index)                           # apply what changed since to_index/refresh, without a rebuild

Layout (one table, default name `items`; `ondevice_catalog` holds key/value metadata: format, bits, vector_dim,
encoder identity, the change counter):

    items(id INTEGER PRIMARY KEY, code BLOB NOT NULL, vector BLOB, scale REAL, tags INTEGER NOT NULL,
          category INTEGER NOT NULL, text TEXT, rev INTEGER NOT NULL)

`code` is a sqlite-vec `bit[N]` value as sqlite-vec stores it (N/8 bytes, element i at bit i % 8 of byte i // 8:
ondevice's "little" bit order), so with the sqlite-vec extension loaded `vec_distance_hamming(vec_bit(code),
vec_bit(?))` or `INSERT INTO vec_items(rowid, embedding) SELECT id, vec_bit(code) FROM items` work on it as is.
`vector` is a sqlite-vec `int8[dim]` value (dim bytes) and `scale` its per-row float (vector ~= int8 * scale). `tags`
is the uint64 mask stored as the int64 with the same bits. Every add, remove and update is one transaction (WAL
journal, synchronous FULL): a crash loses at most the batch in flight, never a committed one. Removed ids are kept in
`ondevice_removed` with the change counter so `refresh` can bring an index up to date.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ondevice.bits import code_bytes
from ondevice.errors import OndeviceError
from ondevice.index import MAX_BITS, MAX_VECTOR_DIM, EncoderId, HammingIndex, quantize_int8
from ondevice.io import atomic_path, check_out_file

FORMAT = "ondevice-sqlite-catalog-1"
_NAME_OK = set("abcdefghijklmnopqrstuvwxyz_0123456789")


def _signed(tags: np.ndarray) -> list[int]:
    """uint64 masks as the int64 values SQLite stores (same bits)."""
    return np.asarray(tags, np.uint64).view(np.int64).tolist()


class Catalog:
    """A SQLite database of items (id, code, optional int8 vector, tags, category, text); transactional writes."""

    def __init__(self, db: sqlite3.Connection, path: Path, table: str):
        self._db = db
        self.path = path
        self.table = table
        meta = dict(db.execute("SELECT key, value FROM ondevice_catalog").fetchall())
        if meta.get("format") != FORMAT:
            raise OndeviceError(f"{path} is not an ondevice SQLite catalog (format {meta.get('format')!r})")
        try:
            self.bits = int(meta["bits"])
            self.vector_dim = int(meta.get("vector_dim", "0"))
            enc = json.loads(meta.get("encoder", "null"))
        except (KeyError, ValueError) as e:
            raise OndeviceError(f"{path} has broken catalog metadata ({e}); recreate the catalog") from None
        if not 1 <= self.bits <= MAX_BITS or not 0 <= self.vector_dim <= MAX_VECTOR_DIM:
            raise OndeviceError(f"{path} has out-of-range catalog metadata (bits {self.bits}, dim {self.vector_dim})")
        fields = {f.name for f in dataclasses.fields(EncoderId)}
        if enc is not None and not (isinstance(enc, dict) and set(enc) <= fields and all(isinstance(v, str) for v in enc.values())):
            raise OndeviceError(f"{path} has broken catalog metadata (encoder {str(enc)[:80]!r} is not an object of "
                                f"{', '.join(sorted(fields))} texts); recreate the catalog")
        self.encoder = EncoderId(**enc) if isinstance(enc, dict) else None
        _ = self.rev  # a change counter that is not a number fails here, not at the first refresh

    # -- opening ----------------------------------------------------------------------------------------
    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(path, isolation_level=None)  # explicit BEGIN/COMMIT: one transaction per batch
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # a committed batch survives power loss, not only a crash
        except sqlite3.DatabaseError as e:
            raise OndeviceError(f"{path} is not a SQLite database ({e})") from None
        return db

    @classmethod
    def create(cls, path: str | os.PathLike, bits: int, vector_dim: int = 0, table: str = "items",
               encoder: EncoderId | None = None) -> Catalog:
        """Create a new catalog database at `path` (it must not exist yet)."""
        path = Path(path)
        if path.exists() and (not path.is_file() or path.stat().st_size):  # an empty file is a new SQLite database
            raise OndeviceError(f"{path} exists; open it with Catalog.open or choose another name")
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= bits <= MAX_BITS:
            raise OndeviceError(f"bits must be an integer from 1 to {MAX_BITS}, got {bits!r}")
        if not isinstance(vector_dim, (int, np.integer)) or not 0 <= vector_dim <= MAX_VECTOR_DIM:
            raise OndeviceError(f"vector_dim must be 0 (no vectors) to {MAX_VECTOR_DIM}, got {vector_dim!r}")
        if not table or set(table) - _NAME_OK or table[0].isdigit() or table.startswith("ondevice_"):
            raise OndeviceError(f"table must be a lower-case SQL name (letters, digits, _), got {table!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        db = cls._connect(path)
        meta = {"format": FORMAT, "bits": str(int(bits)), "vector_dim": str(int(vector_dim)), "table": table,
                "rev": "0", "encoder": json.dumps(None if encoder is None else encoder.__dict__)}
        with _transaction(db):
            db.execute("CREATE TABLE ondevice_catalog(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute(f"CREATE TABLE {table}(id INTEGER PRIMARY KEY, code BLOB NOT NULL, vector BLOB, scale REAL, "
                       "tags INTEGER NOT NULL DEFAULT 0, category INTEGER NOT NULL DEFAULT 0, text TEXT, "
                       "rev INTEGER NOT NULL)")
            db.execute(f"CREATE INDEX {table}_rev ON {table}(rev)")
            db.execute("CREATE TABLE ondevice_removed(id INTEGER PRIMARY KEY, rev INTEGER NOT NULL)")
            db.executemany("INSERT INTO ondevice_catalog VALUES (?, ?)", meta.items())
        return cls(db, path, table)

    @classmethod
    def open(cls, path: str | os.PathLike) -> Catalog:
        """Open an existing catalog database."""
        path = Path(path)
        if not path.is_file():
            raise OndeviceError(f"catalog not found: {path}")
        db = cls._connect(path)
        try:
            row = db.execute("SELECT value FROM ondevice_catalog WHERE key = 'table'").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise OndeviceError(f"{path} is not an ondevice SQLite catalog (no ondevice_catalog table)") from None
        table = row[0] if row else ""
        if not table or set(table) - _NAME_OK:
            db.close()
            raise OndeviceError(f"{path} names no valid items table in its catalog metadata")
        return cls(db, path, table)

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def __enter__(self) -> Catalog:  # noqa: PYI034 (Self needs Python 3.11)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return int(self._db.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])

    @property
    def rev(self) -> int:
        """The change counter: incremented by every committed add, remove or update."""
        row = self._db.execute("SELECT value FROM ondevice_catalog WHERE key = 'rev'").fetchone()
        try:
            return int(row[0])
        except (TypeError, ValueError):
            raise OndeviceError(f"{self.path} has broken catalog metadata (rev {row[0] if row else None!r} is not a "
                                "number); recreate the catalog") from None

    # -- writing ------------------------------------------------------------------------------------------
    def _rows(self, codes, ids, vectors, tags, categories, texts) -> list[tuple]:
        probe = HammingIndex(self.bits)  # the index's own checks: one error message for both
        codes = probe._check_codes(codes, "codes")
        n = len(codes)
        ids = np.asarray(ids)
        if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer) or (n and ids.min() < 0):
            raise OndeviceError(f"ids must be non-negative integers of shape ({n},), got {ids.dtype} {ids.shape}")
        if len(np.unique(ids)) != n:
            raise OndeviceError("ids contain duplicates; every item needs its own id")
        if self.vector_dim:
            if vectors is None:
                raise OndeviceError(f"this catalog keeps int8 vectors ({self.vector_dim} dims): pass vectors=")
            v = np.asarray(vectors)
            if v.shape != (n, self.vector_dim):
                raise OndeviceError(f"vectors must have shape ({n}, {self.vector_dim}), got {v.shape}")
            q8, scales = quantize_int8(v)
        elif vectors is not None:
            raise OndeviceError("this catalog keeps no vectors (created with vector_dim=0)")
        tg, ct = probe._check_attributes(tags, categories, n)
        tg = np.zeros(n, np.uint64) if tg is None else tg
        ct = np.zeros(n, np.int32) if ct is None else ct
        if texts is not None and (len(texts) != n or not all(isinstance(t, str) for t in texts)):
            raise OndeviceError(f"texts must be {n} strings, one per item")
        tags_i = _signed(tg)
        return [(int(ids[i]), codes[i].tobytes(), q8[i].tobytes() if self.vector_dim else None,
                 float(scales[i]) if self.vector_dim else None, tags_i[i], int(ct[i]),
                 None if texts is None else texts[i]) for i in range(n)]

    def _bump(self) -> int:
        rev = self.rev + 1
        self._db.execute("UPDATE ondevice_catalog SET value = ? WHERE key = 'rev'", (str(rev),))
        return rev

    def add(self, codes: np.ndarray, ids: np.ndarray, *, vectors: np.ndarray | None = None,
            tags: np.ndarray | None = None, categories: np.ndarray | None = None,
            texts: Sequence[str] | None = None) -> None:
        """Insert new items in one transaction (all or none); an id already present is an error."""
        rows = self._rows(codes, ids, vectors, tags, categories, texts)
        with _transaction(self._db):
            rev = self._bump()
            try:
                self._db.executemany(f"INSERT INTO {self.table}(id, code, vector, scale, tags, category, text, rev) "
                                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [r + (rev,) for r in rows])
            except sqlite3.IntegrityError:
                raise OndeviceError("some ids are already in the catalog; use update() to replace them") from None
            self._db.executemany("DELETE FROM ondevice_removed WHERE id = ?", [(r[0],) for r in rows])

    def update(self, ids: np.ndarray, codes: np.ndarray, *, vectors: np.ndarray | None = None,
               tags: np.ndarray | None = None, categories: np.ndarray | None = None,
               texts: Sequence[str] | None = None) -> None:
        """Replace existing items by id in one transaction; every id must be present."""
        rows = self._rows(codes, ids, vectors, tags, categories, texts)
        with _transaction(self._db):
            missing = [r[0] for r in rows if self._db.execute(f"SELECT 1 FROM {self.table} WHERE id = ?",
                                                              (r[0],)).fetchone() is None]
            if missing:
                raise OndeviceError(f"{len(missing)} ids are not in the catalog (e.g. {missing[0]}); use add()")
            rev = self._bump()
            self._db.executemany(f"REPLACE INTO {self.table}(id, code, vector, scale, tags, category, text, rev) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [r + (rev,) for r in rows])

    def remove(self, ids: np.ndarray) -> int:
        """Delete items by id in one transaction (unknown ids are ignored); returns how many were removed."""
        ids = np.asarray(ids).reshape(-1)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise OndeviceError(f"ids must be integers, got {ids.dtype}")
        with _transaction(self._db):
            rev = self._bump()
            removed = 0
            for i in {int(i) for i in ids}:
                if self._db.execute(f"DELETE FROM {self.table} WHERE id = ?", (i,)).rowcount:
                    removed += 1  # only ids that were there: refresh() replays these removals
                    self._db.execute("REPLACE INTO ondevice_removed(id, rev) VALUES (?, ?)", (i, rev))
        return removed

    # -- reading ------------------------------------------------------------------------------------------
    def texts(self, ids: Sequence[int]) -> list[str | None]:
        """The stored text of each id (None when missing)."""
        out = []
        for i in ids:
            row = self._db.execute(f"SELECT text FROM {self.table} WHERE id = ?", (int(i),)).fetchone()
            text = row[0] if row else None
            out.append(text.decode("utf-8", "replace") if isinstance(text, bytes) else text if isinstance(text, str) or text is None
                       else str(text))  # a row written by another tool: text as text
        return out

    def _select(self, where: str = "", args: tuple = ()) -> dict:
        nb = code_bytes(self.bits)
        rows = self._db.execute(f"SELECT id, code, vector, scale, tags, category FROM {self.table} {where} ORDER BY id",
                                args).fetchall()
        n = len(rows)
        if any(not isinstance(r[1], bytes) or len(r[1]) != nb for r in rows):
            raise OndeviceError(f"{self.path} holds a code that is not {nb} bytes; the catalog is corrupt")
        if any(not isinstance(r[4], int) or not isinstance(r[5], int) for r in rows):
            raise OndeviceError(f"{self.path} holds tags or a category that is not an integer; the catalog is corrupt")
        if self.vector_dim and any(not isinstance(r[2], bytes) or not isinstance(r[3], (int, float)) for r in rows):
            raise OndeviceError(f"{self.path} holds a vector that is not {self.vector_dim} int8 values with a scale")
        codes = np.frombuffer(b"".join(r[1] for r in rows), np.uint8).reshape(n, nb)
        out = {"ids": np.array([r[0] for r in rows], np.int64), "codes": codes,
               "tags": np.array([r[4] for r in rows], np.int64).view(np.uint64),
               "categories": np.array([r[5] for r in rows], np.int64)}
        if self.vector_dim:
            if any(r[2] is None or len(r[2]) != self.vector_dim or r[3] is None for r in rows):
                raise OndeviceError(f"{self.path} holds a vector that is not {self.vector_dim} int8 values with a scale")
            out["vectors"] = np.frombuffer(b"".join(r[2] for r in rows), np.int8).reshape(n, self.vector_dim)
            out["scales"] = np.array([r[3] for r in rows], np.float32)
        return out

    def to_index(self, threads: int | None = None) -> HammingIndex:
        """A HammingIndex of every item (codes, ids, int8 vectors when kept, attributes), read in one snapshot."""
        with _transaction(self._db, write=False):
            data = self._select()
            rev = self.rev
        index = HammingIndex(self.bits, threads=threads, encoder=self.encoder)
        _add(index, data)
        index.catalog_rev = rev  # what refresh() continues from
        return index

    def refresh(self, index: HammingIndex) -> int:
        """Bring an index made by to_index (or refreshed before) up to the catalog's state; returns rows changed."""
        since = getattr(index, "catalog_rev", None)
        if since is None:
            raise OndeviceError("refresh needs an index made by Catalog.to_index (it records the catalog revision)")
        with _transaction(self._db, write=False):
            data = self._select("WHERE rev > ?", (since,))
            gone = np.array([r[0] for r in self._db.execute("SELECT id FROM ondevice_removed WHERE rev > ?",
                                                            (since,))], np.int64)
            rev = self.rev
        index.remove(np.concatenate([gone, data["ids"]]))  # updated rows are removed and added again
        _add(index, data)
        index.catalog_rev = rev
        return len(gone) + len(data["ids"])


def _add(index: HammingIndex, data: dict) -> None:
    if "vectors" in data:
        index.add(data["codes"], data["ids"], vectors=data["vectors"], scales=data["scales"], tags=data["tags"],
                  categories=data["categories"])
    else:
        index.add(data["codes"], data["ids"], tags=data["tags"], categories=data["categories"])


class _transaction:
    """BEGIN ... COMMIT around a block (ROLLBACK on any error); write=False takes a consistent read snapshot."""

    def __init__(self, db: sqlite3.Connection, write: bool = True):
        self.db, self.write = db, write

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE" if self.write else "BEGIN")

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")


def write_index(index: HammingIndex, path: str | os.PathLike, texts: Sequence[str] | None = None,
                table: str = "items") -> Catalog:
    """Write a whole HammingIndex (codes, int8 vectors, attributes, ids; `texts` in row order) into a new catalog."""
    path = check_out_file(path, "catalog")
    if path.exists():
        raise OndeviceError(f"{path} exists; write the catalog to a new name (or update it with Catalog.open)")
    with atomic_path(path) as tmp:  # built under a temporary name: a crash never leaves half a catalog at `path`
        cat = _fill(index, tmp, texts, table)
        cat._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cat.close()
    return Catalog.open(path)


def _fill(index: HammingIndex, path: Path, texts: Sequence[str] | None, table: str) -> Catalog:
    vec = index.vectors
    cat = Catalog.create(path, index.bits, index.vector_dim, table=table, encoder=index.encoder)
    rows = cat._rows(index.codes, index.ids, None, index.tags if index.has_attributes else None,
                     index.categories if index.has_attributes else None, texts) if vec is None else None
    if vec is not None:  # the int8 values go in as they are: no second quantization
        q8, scales = vec
        base = cat._rows(index.codes, index.ids, np.zeros((len(index), index.vector_dim), np.float32), index.tags,
                         index.categories, texts)
        rows = [(r[0], r[1], q8[i].tobytes(), float(scales[i]), *r[4:]) for i, r in enumerate(base)]
    with _transaction(cat._db):
        rev = cat._bump()
        cat._db.executemany(f"INSERT INTO {table}(id, code, vector, scale, tags, category, text, rev) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [r + (rev,) for r in rows])
    return cat
