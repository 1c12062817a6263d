"""What "sensitive path" and "secret resource" mean: one definition for every part of callgate.

A *sensitive path* is a place whose content is a secret: key and credential stores (``~/.ssh``,
``~/.aws``, ``~/.gnupg``, ``~/.azure``, ``~/.kube``, ``~/.docker``, ``~/.config/gcloud``), private
keys (``id_rsa``, ``id_ed25519`` …), environment files (``.env``, ``.env.local``, ``.envrc``),
login and token files (``.netrc``, ``.pgpass``, ``.git-credentials``, ``.npmrc``, ``.pypirc``),
the system's password files (``/etc/shadow``, ``/etc/gshadow``, ``/etc/sudoers``), and anything
named ``credentials`` (anywhere in a name: ``mycredentials``) or ``secret``/``secrets`` (as a
whole word of a name: ``config/secrets.yaml``, not ``secretary.py``), and callgate's own keys:
the policy cache's secret (``~/.cache/callgate/key``), a Claude Code project's session key
(``.callgate/state.key``) and an audit log's signing key (``*.db.key``). With one of those, an
agent could forge what callgate trusts (a cached policy, a session's saved state, a checkpoint).

:data:`SENSITIVE_PATH` searches any text (a path, a command line, a JSON value) and is what the
run-state counters, the content guards and the sandbox's credential masks all use;
:func:`is_sensitive_name` asks the same question of one file name. The text is matched as
written: ``~``, ``$HOME``, ``/root`` and repeated or trailing slashes all spell the same place,
because the match looks at the name and the separator in front of it, never at the prefix.
"""

from __future__ import annotations

import re2  # google-re2 ships no type information (ignore_missing_imports in pyproject)

from callgate.matchers._screen import Screened

# What may stand before a dot-directory or file name: a path separator, the start of a word of
# a command line, a quote, an assignment or option separator.
_BEFORE = r"(?:^|[/\\\s~\"'`=:;,(<>|&])"
# What may follow it: a separator, the end of a word, a quote, the end of the text.
_AFTER = r"(?:[/\\\s\"'`;,)<>|&]|$)"

#: Paths whose content is secret (searched in any text; see the module docstring). RE2, so a
#: search is linear in the text whatever it holds (the texts are the agent's parameters); behind
#: a screen of the literals every match holds, so most texts never reach RE2.
SENSITIVE_PATH = Screened(re2.compile(
    r"(?i)"
    rf"{_BEFORE}\.(?:ssh|gnupg|aws|azure|kube|docker|netrc|pgpass|git-credentials|npmrc|pypirc)"
    rf"{_AFTER}"
    rf"|{_BEFORE}\.config[/\\]+gcloud{_AFTER}"
    rf"|{_BEFORE}\.env(?:rc)?(?:[._-]|{_AFTER})"
    r"|id_(?:rsa|dsa|ecdsa|ed25519)"
    r"|[/\\]etc[/\\](?:\.?[/\\])*(?:shadow|gshadow|sudoers)"
    r"|credential"
    rf"|(?:{_BEFORE}|[_.-])secrets?(?:[_.-]|{_AFTER})"
    rf"|{_BEFORE}\.cache[/\\]+callgate[/\\]+key{_AFTER}"
    rf"|{_BEFORE}\.callgate[/\\]+state\.key{_AFTER}"
    rf"|\.db\.key{_AFTER}",
), (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc", ".pgpass", ".npmrc",
    ".pypirc", ".config", ".env", "id_", "shadow", "sudoers", "credential", "secret", "callgate",
    ".db.key"),
    ignore_case=True)

#: Names of resources that hold secrets wherever they are: tables, vault endpoints, URLs.
SECRET_RESOURCE = Screened(re2.compile(
    r"(?i)\b(secrets?|credentials?|api_keys?|passwords?|tokens)\b|/vault/|//vault\.|/v1/secret"),
    ("secret", "credential", "api_key", "password", "token", "/vault"), ignore_case=True)


def is_sensitive_name(name: str) -> bool:
    """True when a single file or directory name (no separator) is sensitive by itself.

    The same definition as :data:`SENSITIVE_PATH`, asked of the name as the last component of
    a path: ``.ssh``, ``.env.local``, ``id_ed25519.pub``, ``my-credentials.json``. Names that are
    sensitive only in a place (``shadow`` is, under ``/etc``) are not.
    """
    return bool(SENSITIVE_PATH.search("/" + name))

