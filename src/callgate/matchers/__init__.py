"""Matchers: the one definition of each security term the checks share.

``_paths`` (canonical paths, globs, roots a symlink leads out of), ``_hosts`` (host patterns),
``_commands`` and ``_shellwords`` (programs a command line runs), ``_regex`` (policy patterns on
RE2), ``_sensitive`` (credential paths and names). The policy loader, the kernel's steps, the
guards, the sandbox and the executors all match with these.
"""
