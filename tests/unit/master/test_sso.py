"""Single sign-on without a provider (issue 30 scope 4): the ``oidc`` config's checks,
the routes' refusals, the CLI's one-time codes and who may be signed in. The flow
against a real provider is tests/integration/test_sso_oidc.py."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from dauntless.cli.sso import pkce_pair
from dauntless.config import MasterConfig, OIDCConfig
from dauntless.master.app import create_app
from dauntless.master.authz import read_grants
from dauntless.master.db import Database
from dauntless.master.models import groups, sso_users, users
from dauntless.master.models.sso_users import SsoRefused
from dauntless.master.rbac import ROLES, Perm
from dauntless.master.sso import OIDCClient, SsoError, claim_strings, s256_challenge
from dauntless.master.testing import bearer, login

ENABLED = {
    "enabled": True,
    "idp_recipient_url": "http://127.0.0.1:9",
    "idp_sso_url": "http://127.0.0.1:9/idp",
    "client_id": "dauntless",
    "client_secret": "s3cret",
}


def test_the_oidc_config_names_what_is_missing(tmp_path):
    with pytest.raises(ValidationError, match=r"oidc.enabled needs oidc.idp_recipient_url"):
        OIDCConfig(enabled=True, idp_sso_url="http://x", client_id="c", client_secret="s")
    with pytest.raises(ValidationError, match="client_secret_file"):
        OIDCConfig(**{**ENABLED, "client_secret": None})
    with pytest.raises(ValidationError, match="not both"):
        OIDCConfig(**{**ENABLED, "client_secret_file": "/x"})
    with pytest.raises(ValidationError, match="expected an http"):
        OIDCConfig(**{**ENABLED, "idp_sso_url": "ftp://idp"})
    config = OIDCConfig(**{**ENABLED, "scim_authentication_attribute": "userName"})
    assert config.warnings() == [
        "oidc.scim_authentication_attribute is not used: Dauntless has no SCIM server"
    ]
    assert "s3cret" not in repr(config)  # a SecretStr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        OIDCClient(
            OIDCConfig(**{**ENABLED, "client_secret": None, "client_secret_file": str(empty)})
        )


def test_the_routes_refuse_bad_sign_ins_with_the_reason(tmp_path):
    app = create_app(MasterConfig(data_dir=str(tmp_path), port=18084, oidc=ENABLED), run_loop=False)
    with TestClient(app) as client:
        assert client.get("/api/v1/master").json()["sso_providers"] == [
            {
                "name": "OIDC",
                "sso_url": "http://127.0.0.1:9/oidc/sso",
                "type": "OIDC",
                "always_redirect": False,
            }
        ]
        r = client.get("/oidc/sso", follow_redirects=False)
        assert r.status_code == 502 and "could not be reached" in r.text  # nothing on port 9
        r = client.get("/oidc/sso", params={"relayState": "cli"}, follow_redirects=False)
        assert r.status_code == 400 and "needs cli_port and cli_challenge" in r.text
        r = client.get("/oidc/callback", params={"state": "made-up", "code": "x"})
        assert r.status_code == 401 and "unknown or took too long" in r.text
        r = client.get("/oidc/callback", params={"error": "access_denied"})
        assert r.status_code == 401 and "refused the sign-in: access_denied" in r.text
        r = client.post("/oidc/cli-confirm", data={"confirm": "made-up"}, follow_redirects=False)
        assert r.status_code == 401 and "unknown, used or expired" in r.text
        verifier, _ = pkce_pair()
        r = client.post(
            "/api/v1/auth/sso/exchange", json={"code": "made-up", "code_verifier": verifier}
        )
        assert r.status_code == 401 and "invalid, used or expired" in r.json()["detail"]
        # Remote users (single sign-on only) have no password, and get none.
        admin = bearer(login(client))
        body = {"username": "zed@example.test", "password": "pw", "remote": True}
        r = client.post("/api/v1/users", headers=admin, json=body)
        assert r.status_code == 400 and "has no password" in r.json()["detail"]
        r = client.post("/api/v1/users", headers=admin, json={**body, "password": ""})
        assert r.status_code == 201 and r.json()["user"]["remote"] is True
        zed = r.json()["user"]["id"]
        r = client.post(f"/api/v1/users/{zed}/password", headers=admin, json={"password": "x"})
        assert r.status_code == 400 and "signs in through single sign-on" in r.json()["detail"]
        r = client.post("/api/v1/auth/login", json={"username": "zed@example.test", "password": ""})
        assert r.status_code == 401


def test_cli_codes_are_single_use_and_bound_to_the_verifier(tmp_path):
    client = OIDCClient(OIDCConfig(**ENABLED))
    verifier, challenge = pkce_pair()
    assert s256_challenge(verifier) == challenge  # the CLI's S256 is Authlib's
    code = client.issue_cli_code(7, challenge)
    with pytest.raises(SsoError, match="does not match"):
        client.redeem_cli_code(code, pkce_pair()[0])
    code = client.issue_cli_code(7, challenge)
    assert client.redeem_cli_code(code, verifier) == 7
    with pytest.raises(SsoError, match="invalid, used or expired"):
        client.redeem_cli_code(code, verifier)
    late = OIDCClient(OIDCConfig(**ENABLED), clock=lambda: 0.0)
    code = late.issue_cli_code(7, challenge)
    late.clock = lambda: 10_000.0
    with pytest.raises(SsoError, match="expired"):
        late.redeem_cli_code(code, verifier)
    assert claim_strings(["ml", " ml ", "", 3, "ops"]) == ("ml", "ops")
    assert claim_strings("admins") == ("admins",) and claim_strings({"a": 1}) == ()


def test_who_the_provider_may_sign_in(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/sso.db")
    db.migrate()
    with db.write() as s:
        users.create_user(s, "pat@example.test", "hash", False, None, 0.0)
    with db.write() as s, pytest.raises(SsoRefused, match="not created with --remote"):
        sso_users.sso_user(s, "pat@example.test", None, True, 1.0)
    with db.write() as s, pytest.raises(SsoRefused, match="det user create kim@example.test"):
        sso_users.sso_user(s, "kim@example.test", None, False, 1.0)
    with db.write() as s:
        kim = sso_users.sso_user(s, "kim@example.test", "Kim", True, 1.0)
        assert (kim.remote, kim.password_hash, kim.display_name) == (True, None, "Kim")
        kim_id = kim.id
        # An admin made group "ml" (with a role on a workspace) and put kim in "manual" by
        # hand before kim's first sign-in.
        ml = groups.create_group(s, 0.0, "ml")
        groups.create_group(s, 0.0, "manual", [kim_id])
        groups.add_assignments(s, 0.0, [groups.Assignment(5, None, ml.id, None)])
    with db.write() as s:
        assert sso_users.sync_sso_groups(s, kim_id, ["ops", "ml", "ops", " ", "x" * 300], 1.0) == [
            "ml",
            "ops",
        ]
    with db.read() as s:
        mine = {g.name for g, _n in groups.search_groups(s, user_id=kim_id)[0]}
        assert mine == {"ml", "ops", "manual"}  # "ops" was created for the claim
        grants = read_grants(s, kim_id, basic=False)
        assert grants.cluster == ROLES[5].permissions  # the Editor role of group "ml"
    with db.write() as s:
        sso_users.sync_sso_groups(s, kim_id, ["ml"], 2.0)
        assert sso_users.read_sso_groups(s, kim_id) == ["ml"]
        mine = {g.name for g, _n in groups.search_groups(s, user_id=kim_id)[0]}
        assert mine == {"ml", "manual"}  # left "ops" (claimed before), kept the hand-made one
    with db.write() as s:
        sso_users.sync_sso_groups(s, kim_id, [], 2.5)
        mine = {g.name for g, _n in groups.search_groups(s, user_id=kim_id)[0]}
        assert mine == {"manual"}
        assert not read_grants(s, kim_id, basic=False).has(Perm.CREATE_EXPERIMENT)
        with pytest.raises(SsoRefused, match="at most 1000"):
            sso_users.sync_sso_groups(s, kim_id, [f"g{i}" for i in range(1001)], 2.6)
    with db.write() as s:
        users.update_user(s, kim_id, 2.0, active=False)
    with db.write() as s, pytest.raises(SsoRefused, match="deactivated"):
        sso_users.sso_user(s, "kim@example.test", None, True, 3.0)
    with db.write() as s, pytest.raises(SsoRefused, match="cannot be used"):
        sso_users.sso_user(s, "two words", None, True, 3.0)
    db.dispose()
