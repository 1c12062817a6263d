"""Text helpers of the guards: walking parameters, entropy and credential shapes."""

from __future__ import annotations

from callgate.guards._text import (
    entropy,
    high_entropy_tokens,
    key_shapes,
    looks_encoded,
    secret_assignments,
    walk_strings,
)


def test_walk_strings_sees_keys_values_and_numbers_in_nested_parameters() -> None:
    found = list(walk_strings({"a": [{"k": "v"}, 7], "b": ("x",), "c": True}))
    assert found == ["a", "k", "v", "7", "b", "x", "c"]


def test_entropy_and_encoded_shapes() -> None:
    assert entropy("") == 0.0 and entropy("aaaa") == 0.0
    assert abs(entropy("abcd") - 2.0) < 1e-9
    assert looks_encoded("deadbeef" * 4, min_len=32)
    assert looks_encoded("QWRhIExvdmVsYWNlLGFkYUBleGFtcGxlLm9yZw", min_len=32)
    assert not looks_encoded("internationalisation-of-the-software", min_len=32)
    assert not looks_encoded("short", min_len=32)


def test_credential_shapes_are_named() -> None:
    names = {name for name, _ in key_shapes(
        "AKIAQ3EGRT7ZKXN4PL2M ghp_" + "a1B2" * 9 + " sk-" + "x" * 24 +
        " -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234567\n-----END RSA PRIVATE KEY-----")}
    assert names == {"aws-access-key", "github-token", "api-key", "pem-private-key"}


def test_secret_assignments_and_high_entropy_tokens() -> None:
    text = 'name = "shop"\nDB_PASSWORD="Xk29vLq7"\napi_key: abcdef123456\nurl=https://a.b/c\n'
    assert secret_assignments(text) == ["Xk29vLq7", "abcdef123456"]
    assert high_entropy_tokens("see docs.python.org/library and wJalrXUtnFEMI/K7MDENG/bPxRfi") \
        == ["wJalrXUtnFEMI/K7MDENG/bPxRfi"]
