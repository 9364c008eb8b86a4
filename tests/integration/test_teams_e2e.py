"""Teams end to end (issue 30): a real master process under ``security.authz.type: rbac``,
the real ``det`` CLI, and the WebUI in Chromium.

Three users and two workspaces: ``vic`` is Viewer on A, ``eve`` Editor on A, ``wes``
WorkspaceAdmin on B. The Viewer reads A's experiment but cannot pause it; the Editor
creates in A and is refused in B; a pool bound to A refuses an experiment of B, naming
the pool; in the browser each user sees only their workspaces (and the Viewer no action
buttons, the Editor the experiment's Pause; only admins the Admin link).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml
from chromium import launch_chromium

from .test_webui import SHOTS

pytestmark = pytest.mark.integration

EXPERIMENT = {
    "name": "teams",
    "entrypoint": "model_def:Trial",
    "hyperparameters": {"global_batch_size": 8},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def _config(tmp_path: Path, name: str, **fields: object) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**EXPERIMENT, **fields}))
    return str(path)


def test_three_users_two_workspaces(cluster_factory, tmp_path: Path) -> None:
    master_config = tmp_path / "master.yaml"
    master_config.write_text(
        yaml.safe_dump(
            {
                "security": {"authz": {"type": "rbac"}},
                "resource_pools": [{"pool_name": "default"}, {"pool_name": "poolA"}],
            }
        )
    )
    c = cluster_factory(f"sqlite:///{tmp_path}/master.db")
    c.master_args = ["--config-file", str(master_config)]
    c.start_master()
    admin = c.headers()

    def api(method: str, path: str, body: object = None) -> dict:
        r = httpx.request(method, c.url + "/api/v1" + path, json=body, headers=admin, timeout=30)
        assert r.status_code < 300, (path, r.text)
        return r.json()

    for name in ("vic", "eve", "wes"):
        api("POST", "/users", {"username": name, "password": ""})
    # determined gets a password, so the browser asks who signs in.
    api("POST", "/users/2/password", {"password": "not-empty-1"})
    # The setup through the REST API (the CLI's commands for it: tests/unit/cli).
    ws = {n: api("POST", "/workspaces", {"name": n})["workspace"]["id"] for n in "AB"}
    for n in "AB":
        api("POST", f"/workspaces/{ws[n]}/projects", {"name": f"p{n.lower()}"})
    users = {u["username"]: u["id"] for u in api("GET", "/users")["users"]}
    api(
        "POST",
        "/roles/add-assignments",
        {
            "user_role_assignments": [
                {
                    "user_id": users[user],
                    "role_assignment": {"role": {"role_id": role}, "scope_workspace_id": ws[w]},
                }
                for user, role, w in (("vic", 4, "A"), ("eve", 5, "A"), ("wes", 2, "B"))
            ]
        },
    )
    api("POST", "/resource-pools/poolA/workspace-bindings", {"workspace_names": ["A"]})
    det = c.det  # the real CLI
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "model_def.py").write_text("x = 1\n")

    # The Editor creates in A, and is refused in B.
    out = det(
        "-u",
        "eve",
        "e",
        "create",
        _config(tmp_path, "a", workspace="A", project="pa"),
        str(tmp_path / "ctx"),
    ).stdout  # fmt: skip  (ACTIVE; no agent runs it)
    exp_id = int(out.split("Created experiment")[1].split()[0])
    refused = det("-u", "eve", "e", "create", _config(tmp_path, "b", workspace="B", project="pb"),
                  str(tmp_path / "ctx"), check=False)  # fmt: skip
    assert refused.returncode == 1 and "PERMISSION_TYPE_CREATE_EXPERIMENT" in refused.stderr
    # A pool bound to A refuses B's experiment, naming the pool.
    bound = _config(
        tmp_path, "c", workspace="B", project="pb", resources={"resource_pool": "poolA"}
    )
    refused = det("-u", "wes", "e", "create", bound, str(tmp_path / "ctx"), check=False)
    assert refused.returncode == 1 and "poolA" in refused.stderr, refused.stderr
    # The Viewer reads but cannot pause.
    listed = det("-u", "vic", "e", "list", "--json").stdout
    assert [e["id"] for e in json.loads(listed)["experiments"]] == [exp_id]
    refused = det("-u", "vic", "e", "pause", str(exp_id), check=False)
    assert refused.returncode == 1 and "PERMISSION_TYPE_UPDATE_EXPERIMENT" in refused.stderr
    assert c.api(f"/experiments/{exp_id}")["experiment"]["state"] == "ACTIVE"
    listed = det("-u", "wes", "e", "list", "--json").stdout
    assert json.loads(listed)["experiments"] == []  # nothing of A

    pw, browser = launch_chromium()
    SHOTS.mkdir(exist_ok=True)
    errors: list[str] = []
    try:
        for user, workspaces, acts in (
            ("vic", ["A"], False),
            ("eve", ["A"], True),
            ("wes", ["B"], False),
        ):
            ctx = browser.new_context(viewport={"width": 1200, "height": 800})
            page = ctx.new_page()
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.goto(c.url + "/workspaces")
            page.wait_for_selector("#login-form")
            page.fill("#login-username", user)
            page.fill("#login-password", "")
            page.click("#login-submit")
            page.wait_for_selector("#workspaces table[data-loaded]")
            names = page.eval_on_selector_all(
                "#workspaces tr[data-name]", "rs => rs.map(r => r.dataset.name)"
            )
            assert names == workspaces, (user, names)
            options = page.eval_on_selector_all(
                "#workspace-switcher option", "os => os.map(o => o.textContent)"
            )
            assert options == ["All workspaces", *workspaces], (user, options)
            assert page.locator("[data-nav=admin]").count() == 0
            page.screenshot(path=str(SHOTS / f"workspaces-{user}.png"))
            if user != "wes":
                page.click("#workspaces tr[data-name=A] a")
                page.wait_for_selector("#projects table[data-loaded]")
                assert page.locator("#new-project").count() == (1 if user == "eve" else 0)
                page.click("#projects tr[data-name=pa] a")
                page.wait_for_selector(f"#project-experiments tr[data-id='{exp_id}']")
                row = page.locator(f"#project-experiments tr[data-id='{exp_id}']")
                page.wait_for_timeout(300)  # the actions fill in once permissions are known
                assert (row.locator("button[data-action=pause]").count() == 1) == acts, user
                page.screenshot(path=str(SHOTS / f"project-{user}.png"))
            ctx.close()
        # The admin sees both, the Admin link, and the members of A.
        ctx = browser.new_context(viewport={"width": 1200, "height": 800})
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.goto(c.url + "/admin")
        page.wait_for_selector("#login-form")
        page.fill("#login-username", "admin")
        page.click("#login-submit")
        page.wait_for_selector("#admin-groups table[data-loaded]")
        assert page.locator("[data-nav=admin]").is_visible()
        assert page.locator("#admin-users tr[data-user=eve]").count() == 1
        page.screenshot(path=str(SHOTS / "admin.png"))
        page.goto(c.url + "/workspaces")
        page.wait_for_selector("#workspaces table[data-loaded]")
        names = page.eval_on_selector_all(
            "#workspaces tr[data-name]", "rs => rs.map(r => r.dataset.name)"
        )
        assert set(names) >= {"A", "B", "Uncategorized"}
        ctx.close()
    finally:
        browser.close()
        pw.stop()
    assert not errors, errors
