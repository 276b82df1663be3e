"""PLAIN and SCRAM-SHA-256 server sides against the ACL accounts, driven by kafka-python's
own SCRAM client code (its message builder, not a re-implementation)."""

import pytest
from kafka.net.sasl.scram import ScramClient

from strata.broker.acl import AccessList, Account
from strata.broker.kafka.sasl_mechanisms import (AuthFailed, PlainAuth, ScramAuth,
                                                 ScramCredentials, start)

ACL = AccessList([Account("alice1", "secret-a"), Account("bob,=x", "secret-b")])


def _scram(user: str, password: str, creds: ScramCredentials):
    client = ScramClient(user, password, "SCRAM-SHA-256")
    server = ScramAuth(creds)
    server_first = server.step(client.first_message())
    client.process_server_first_message(server_first)
    return client, server


def test_plain_accepts_the_secret_key_and_refuses_others():
    p = PlainAuth(ACL)
    assert p.step(b"\0alice1\0secret-a") == b"" and p.done and p.account.access_key == "alice1"
    for bad in (b"\0alice1\0secret-b", b"\0nobody\0secret-a", b"alice1\0secret-a",
                b"other\0alice1\0secret-a"):
        with pytest.raises(AuthFailed):
            PlainAuth(ACL).step(bad)
    with pytest.raises(AuthFailed, match="already complete"):
        p.step(b"\0alice1\0secret-a")


def test_scram_with_kafka_pythons_client():
    creds = ScramCredentials(ACL)
    client, server = _scram("alice1", "secret-a", creds)
    server_final = server.step(client.final_message())
    client.process_server_final_message(server_final)      # checks the server's signature
    assert server.done and server.account.access_key == "alice1"


def test_scram_escaped_user_name():
    creds = ScramCredentials(ACL)
    client = ScramClient("bob=2C=3Dx", "secret-b", "SCRAM-SHA-256")   # RFC 5802 escaping
    server = ScramAuth(creds)
    client.process_server_first_message(server.step(client.first_message()))
    client.process_server_final_message(server.step(client.final_message()))
    assert server.account.access_key == "bob,=x"


@pytest.mark.parametrize("user,password", [("alice1", "wrong"), ("nobody", "secret-a")])
def test_scram_refuses_wrong_password_and_unknown_user(user, password):
    client, server = _scram(user, password, ScramCredentials(ACL))
    with pytest.raises(AuthFailed, match="unknown user or wrong password"):
        server.step(client.final_message())
    assert not server.done and server.account is None


def test_scram_unknown_user_salt_is_stable_and_unlike_a_real_one():
    creds = ScramCredentials(ACL)
    a = ScramAuth(creds).step(b"n,,n=ghost,r=abc").split(b",")[1]
    b = ScramAuth(creds).step(b"n,,n=ghost,r=xyz").split(b",")[1]
    assert a == b


@pytest.mark.parametrize("first", [b"x,,n=a,r=b", b"p=tls-unique,,n=alice1,r=b", b"n,,r=b",
                                   b"n,,n=alice1", b"n,,m=ext,n=alice1,r=b", b"\xff",
                                   b"n,,n=al=ice,r=b", b"n"])
def test_scram_bad_client_first(first):
    with pytest.raises(AuthFailed):
        ScramAuth(ScramCredentials(ACL)).step(first)


def test_scram_bad_client_final():
    creds = ScramCredentials(ACL)
    client, server = _scram("alice1", "secret-a", creds)
    good = client.final_message()
    for bad in (good.replace(b"r=", b"r=X"), good.rsplit(b",p=", 1)[0], b"c=biws,r=1,p=!!",
                good.replace(b"c=biws", b"c=eSws")):
        _c, s = _scram("alice1", "secret-a", creds)
        with pytest.raises(AuthFailed):
            s.step(bad)


def test_start_refuses_unknown_mechanisms():
    with pytest.raises(AuthFailed, match="GSSAPI"):
        start("GSSAPI", ACL, ScramCredentials(ACL))
