"""Text helpers of the guards: walking parameters, entropy and credential shapes."""

from __future__ import annotations

import subprocess
import sys

import pytest

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


# Texts an agent (or a page it fetched) can supply on which a backtracking engine takes time
# quadratic or worse in their length: many starts of a shape that each scan to the end, and
# lines whose leading blanks or secret-like names every later start scans again.
_MIB = 1 << 20
_ADVERSARIAL = {
    "jwt starts": "'-eyJ' * (_MIB // 4)",
    "pem begins": "'-----BEGIN PRIVATE KEY-----' * (_MIB // 27)",
    "pem ends": "('-----BEGIN PRIVATE KEY-----' + 'x' * 20 + '-----END ') * (_MIB // 60)",
    "blank lines": "'\\n' * _MIB + 'x'",
    "secret names": "'token' * (_MIB // 5)",
    "quoted blanks": "'\\n\"' * (_MIB // 2)",
}


@pytest.mark.parametrize("name", sorted(_ADVERSARIAL))
def test_credential_scans_of_a_1mib_adversarial_text_finish_in_a_child_bounded_by_a_timeout(
    name: str
) -> None:
    # A child process, so a regression is a timeout (failure), never a hung test run. Linear
    # scans take well under a second; the backtracking ones took minutes to hours.
    code = (
        "from callgate.guards._text import key_shapes, secret_assignments, high_entropy_tokens\n"
        f"_MIB = {_MIB}\ntext = {_ADVERSARIAL[name]}\n"
        "key_shapes(text); secret_assignments(text); high_entropy_tokens(text)\n"
        "print('done')\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"scanning {name} ({_ADVERSARIAL[name]}) did not finish in 60 s")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"


def test_credential_shapes_keep_what_python_finds_in_ordinary_text() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234567\n-----END RSA PRIVATE KEY-----"
    aws = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "x" * 10
    text = f"a {pem} b {pem} AWS_SECRET_ACCESS_KEY = '{aws}' eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl"
    found = key_shapes(text)
    assert found.count(("pem-private-key", pem)) == 2  # lazy: two keys, not one span
    assert ("aws-secret-key", aws) in found
    assert ("jwt", "eyJhbGciOiJI.eyJzdWIiOiIx.c2lnbmF0dXJl") in found
    assert secret_assignments('  "Api_Key": "abc123def"\nPASSWD=hunter22 # x\n') == [
        "abc123def", "hunter22"]


def test_text_with_a_lone_surrogate_is_scanned_not_raised_on() -> None:
    # The decoder turns a "\\ud800" escape into a lone surrogate, which has no UTF-8 form.
    assert key_shapes("\ud800 AKIAQ3EGRT7ZKXN4PL2M \udfff") == [
        ("aws-access-key", "AKIAQ3EGRT7ZKXN4PL2M")]
    assert secret_assignments("\udc80\nPASSWORD=hunter22\ud800") == ["hunter22\ufffd"]
