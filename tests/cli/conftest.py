"""The command-line tests reuse the fixtures of the packages whose commands they drive."""

from tests.audit.conftest import kit, template
from tests.manifest.conftest import example_manifest, example_path

__all__ = ["example_manifest", "example_path", "kit", "template"]
