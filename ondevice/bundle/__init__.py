"""The bundle format: one module owns manifest.json and the file table (ondevice.bundle.manifest)."""

from ondevice.bundle.manifest import read_manifest, seal, verify_files

__all__ = ["read_manifest", "seal", "verify_files"]
