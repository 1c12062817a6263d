"""``python -m callgate.manifest generate|verify|lint-tools ...``."""

from callgate.cli._manifest import standalone

if __name__ == "__main__":
    standalone()
