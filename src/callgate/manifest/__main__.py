"""``python -m callgate.manifest generate|verify|lint-tools ...``."""

from callgate.manifest.cli import standalone

if __name__ == "__main__":
    standalone()
