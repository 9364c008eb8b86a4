"""A typed session over the master's REST API (docs/protocol.md, "User-facing")."""

from __future__ import annotations

import getpass
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast
from urllib.parse import quote, unquote

import httpx
import yaml

from dauntless._auth import read_task_secret
from dauntless._http import RetryPolicy, internal_client
from dauntless._tls import (
    cert_file_from_env,
    describe_cert_error,
    is_cert_verify_error,
    make_verify,
)

from ._archive import SkippedEntry, extract_archive
from ._auth import DEFAULT_USER, PASSWORD_ENV, TOKEN_ENV, USER_ENV, TokenStore
from ._errors import APIError, AuthenticationError, MasterUnreachableError
from ._types import (
    Agent,
    Checkpoint,
    CreatedExperiment,
    Experiment,
    ExperimentDetail,
    ExperimentPage,
    MasterInfo,
    Metric,
    Trial,
    TrialLogs,
    User,
)
from ._url import resolve_master_url

API_PREFIX = "/api/v1"
EXPERIMENT_FILTERS = (
    "id",
    "workspace_id",
    "project_id",
    "state",
    "owner",
    "label",
    "searcher",
    "name",
    "start_after",
    "start_before",
    "end_after",
    "end_before",
    "hp",
    "best_metric",
)
"""The filters :meth:`Session.list_experiments` passes to ``GET /experiments``."""


METRICS_PAGE = 5000
"""Batch counts per page when :meth:`Session.get_trial_metrics` reads a trial's reports."""


class Session:
    """A connection to one master, with retries for a master that is (re)starting.

    Retries follow the clients' one policy (:class:`dauntless._http.RetryPolicy`):
    idempotent requests (GET) are retried on any network error or timeout and on
    500/502/503/504 answers; other methods are retried only when the connection could
    not be opened at all (nothing was sent). The delay before retry ``k`` (from 0) is
    drawn from ``[d/2, d]`` with ``d = min(max_backoff, backoff * 2**k)`` seconds.

    Args:
        master_url: the master's address (``http://host:port`` or ``host:port``); when
            None, ``DET_MASTER`` or ``http://127.0.0.1:8080`` (see
            :func:`resolve_master_url`).
        timeout: seconds to wait for a connection and for each read of an answer.
        retries: how many times a failed request is retried (0 disables retries).
        backoff: seconds of the first retry delay; it doubles each retry.
        max_backoff: the largest retry delay, in seconds.
        upload_timeout: seconds allowed to send an experiment's context upload.
        transport: an httpx transport to use instead of the network (tests).
        sleep: the function that waits between retries (tests pass a recorder).
        user: the user to act as; when None, ``DET_USER``, else the user last signed in
            on this master (the store's active user), else ``determined``.
        token: a bearer token to use as is; when None, ``DET_USER_TOKEN``, else a saved
            token of the user (see below).
        cert_file: a PEM CA bundle that signed the master's TLS certificate, or
            ``"noverify"``; when None, ``DET_MASTER_CERT_FILE``, else the system's trust
            store.
        token_store: where tokens are saved; a :class:`TokenStore` at the default path
            when None.
        login: sign in automatically when the master answers 401 (False: raise
            :class:`AuthenticationError` instead).
        prompt: asks for a password (``prompt(message) -> str``); None uses
            ``getpass.getpass`` when stdin is a terminal and asks nobody otherwise.

    Credentials are found in this order: ``token``/``DET_USER_TOKEN``; a saved token for
    (this master, the user); and, when the master answers 401 (no token, or an expired
    or revoked saved one, which is then forgotten), a sign-in as the user with
    ``DET_PASS``, else with an empty password (a new cluster's built-in users have
    none, as in Determined), else with a password asked on the terminal. A token got by
    signing in is saved for the next session. A request answered 401 is sent again once
    with the new token.

    Raises:
        ValueError: for a bad URL, a missing CA bundle, or a negative/zero numeric
            argument.
        TypeError: when a numeric argument is not a number.

    Every request method raises :class:`APIError` when the master answers with an error
    status (:class:`AuthenticationError` when no valid credentials could be had) and
    :class:`MasterUnreachableError` when it cannot be reached (also when its TLS
    certificate fails verification; the message says how to pass a CA bundle).
    """

    def __init__(
        self,
        master_url: str | None = None,
        timeout: float = 30.0,
        *,
        retries: int = 4,
        backoff: float = 0.25,
        max_backoff: float = 4.0,
        upload_timeout: float = 600.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        user: str | None = None,
        token: str | None = None,
        cert_file: str | None = None,
        token_store: TokenStore | None = None,
        login: bool = True,
        prompt: Callable[[str], str] | None = None,
    ) -> None:
        _check_number("timeout", timeout, positive=True)
        _check_number("backoff", backoff, positive=False)
        _check_number("max_backoff", max_backoff, positive=False)
        _check_number("upload_timeout", upload_timeout, positive=True)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        self.master_url = resolve_master_url(master_url)
        #: Print the cluster message (an answer's ``X-Det-Cluster-Message``) to stderr,
        #: once per session: the CLI sets it (issue 34).
        self.show_cluster_message = False
        self._cluster_message_shown = False
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.upload_timeout = float(upload_timeout)
        self._sleep = sleep
        self._rng = random.Random()
        self.policy = RetryPolicy(
            attempts=retries + 1,
            backoff=self.backoff,
            max_backoff=max(self.backoff, self.max_backoff),
            sleep=sleep,
            rng=self._rng,
        )
        self.cert_file = cert_file if cert_file is not None else cert_file_from_env()
        verify = make_verify(self.cert_file)
        if verify is True and not self.master_url.startswith("https://"):
            # Plain HTTP makes no TLS handshake: no CA store to load (httpx loads it when
            # the client is made, a fifth of a short command's CPU).
            verify = False
        self._client = internal_client(timeout=self.timeout, transport=transport, verify=verify)
        self.token_store = token_store if token_store is not None else TokenStore()
        self._explicit_user = user or os.environ.get(USER_ENV, "").strip() or None
        # In a task the agent hands the owner's token as a file ($DET_USER_TOKEN_FILE).
        self._explicit_token = token or read_task_secret(TOKEN_ENV) or None
        self._token_origin = "the token given to the session" if token else TOKEN_ENV
        self._auto_login = login
        self._prompt = prompt
        #: The user this session acts as, once known (None before the first request).
        self.username: str | None = None
        self._token: str | None = None
        #: Where ``_token`` came from: "explicit", "saved", "login" (None: not resolved).
        self._token_source: str | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the underlying connections. The session is unusable afterwards."""
        self._client.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session(master_url={self.master_url!r})"

    # -- low level ---------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        files: Mapping[str, Any] | None = None,
        timeout: httpx.Timeout | float | None = None,
        auth: bool = True,
    ) -> httpx.Response:
        """Send one request under ``/api/v1``, retrying as the class describes.

        Args:
            method: the HTTP method, for example ``"GET"``.
            path: the route below ``/api/v1``, starting with ``/`` (``"/experiments"``).
            params: query parameters; None values are left out.
            json: a JSON body.
            files: multipart parts, as httpx takes them.
            timeout: a timeout for this request instead of the session's.
            auth: send the session's token and sign in again on 401 (False: send no
                credentials, as for ``POST /auth/login``).

        Returns:
            The response, with a status below 400.

        Raises:
            ValueError: when ``path`` does not start with ``/``.
            APIError: for an error status.
            MasterUnreachableError: when no answer could be had.
        """
        if not path.startswith("/"):
            raise ValueError(f"path must start with '/', got {path!r}")
        method = method.upper()
        url = f"{self.master_url}{API_PREFIX}{path}"
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if auth and self._token_source is None:
            self._initial_token()
        reauthenticated = False
        while True:
            sent_token = self._token if auth else None
            headers = {"Authorization": f"Bearer {sent_token}"} if sent_token else None

            def send(headers: dict[str, str] | None = headers) -> httpx.Response:
                return self._client.request(
                    method,
                    url,
                    params=query or None,
                    json=json,
                    files=files,
                    headers=headers,
                    timeout=self.timeout if timeout is None else timeout,
                )

            try:
                response = self.policy.call(
                    send,
                    retry_error=lambda exc: (
                        isinstance(exc, httpx.TransportError)
                        and self.policy.retryable_error(method, exc, sent=_sent(exc))
                    ),
                    retry_result=lambda r: self.policy.retryable_status(method, r.status_code),
                )
            except httpx.TransportError as exc:
                if is_cert_verify_error(exc):
                    raise MasterUnreachableError(
                        self.master_url, describe_cert_error(self.master_url, exc)
                    ) from None
                raise MasterUnreachableError(self.master_url, _describe(exc)) from None
            if response.status_code == 401 and auth:
                if reauthenticated:
                    raise AuthenticationError(
                        f"the master refused a fresh token: {_api_error(response).detail}"
                    )
                self._reauthenticate(sent_token, _api_error(response))
                reauthenticated = True
                continue
            if self.show_cluster_message and not self._cluster_message_shown:
                message = response.headers.get("x-det-cluster-message")
                if message:
                    self._cluster_message_shown = True
                    sys.stderr.write(f"Cluster message: {unquote(message)}\n")
            if response.status_code >= 400:
                raise _api_error(response)
            return response

    def get_json(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET ``/api/v1{path}`` and decode the JSON answer (see :meth:`request`)."""
        return _decode(self.request("GET", path, params=params))

    def post_json(self, path: str, body: Any = None) -> Any:
        """POST a JSON body to ``/api/v1{path}`` and decode the answer (see :meth:`request`)."""
        return _decode(self.request("POST", path, json=body if body is not None else {}))

    # -- credentials -------------------------------------------------------------------

    def _initial_token(self) -> None:
        """Pick a token without asking the master: explicit/env, else a saved one."""
        if self._explicit_token:
            self._token, self._token_source = self._explicit_token, "explicit"
            return
        user = self._explicit_user or self.token_store.active_user(self.master_url)
        self.username = user
        saved = self.token_store.get_token(self.master_url, user) if user else None
        self._token = saved
        self._token_source = "saved" if saved else "none"

    def _reauthenticate(self, refused: str | None, error: APIError) -> None:
        """Get a new token after the master answered 401 to ``refused`` (None: no token).

        Raises:
            AuthenticationError: when no token can be had (see the class docstring).
        """
        if refused is not None and self._token_source == "explicit":
            raise AuthenticationError(
                f"{self._token_origin} was refused by the master ({error.detail}); "
                "replace it, or unset it and sign in with `det user login`"
            )
        if refused is not None and self._token_source == "saved" and self.username:
            self.token_store.drop_token(self.master_url, self.username)
        if not self._auto_login:
            raise AuthenticationError(
                f"not signed in to {self.master_url} ({error.detail}); run `det user login`"
            )
        username = self.username or DEFAULT_USER
        # A user named by -u/DET_USER signs in for this command without becoming the
        # active user; the default user (or the active one, again) does become it.
        activate = self._explicit_user is None
        password = os.environ.get(PASSWORD_ENV)
        if password is not None:
            self.login(username, password, activate=activate)
            return
        try:
            self.login(username, "", activate=activate)
            return
        except AuthenticationError:
            pass
        ask = self._prompt
        if ask is None and _stdin_is_tty():
            ask = getpass.getpass
        if ask is None:
            raise AuthenticationError(
                f"user {username!r} needs a password on {self.master_url}: run "
                f"`det user login {username}` (or set {USER_ENV} and {PASSWORD_ENV})"
            )
        self.login(username, ask(f"Password for user '{username}': "), activate=activate)

    def login(
        self, username: str, password: str, *, save: bool = True, activate: bool = True
    ) -> User:
        """``POST /auth/login``: sign in, use the new token from now on and save it.

        Args:
            username: the user name.
            password: the password (``""`` for a built-in user on a new cluster).
            save: save the token in :attr:`token_store`.
            activate: also make ``username`` the master's active user there (the user
                later sessions act as when none is named).

        Returns:
            The signed-in user.

        Raises:
            AuthenticationError: wrong user name or password (401).
            APIError: 403 for a deactivated user.
        """
        if not isinstance(username, str) or not username.strip():
            raise ValueError(f"username must be a non-empty string, got {username!r}")
        try:
            answer = _decode(
                self.request(
                    "POST",
                    "/auth/login",
                    json={"username": username.strip(), "password": password},
                    auth=False,
                )
            )
        except AuthenticationError:
            raise
        except APIError as exc:
            if exc.status == 401:
                raise AuthenticationError(
                    f"could not sign in as {username.strip()!r}: {exc.detail}"
                ) from None
            raise
        token = str(answer["token"])
        user = cast(User, answer.get("user") or {"username": username.strip()})
        name = str(user.get("username") or username.strip())
        self._token, self._token_source, self.username = token, "login", name
        if save:
            self.token_store.set_token(self.master_url, name, token, activate=activate)
        return user

    def logout(self) -> None:
        """``POST /auth/logout``: revoke this session's token and forget it locally.

        Does nothing but forget when the master already considers it invalid (401).
        """
        if self._token_source is None:
            self._initial_token()
        token, name = self._token, self.username
        if token:
            try:
                self._client.post(
                    f"{self.master_url}{API_PREFIX}/auth/logout",
                    json={},
                    headers={"Authorization": f"Bearer {token}"},
                ).raise_for_status()
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code != 401:
                    raise _api_error(exc.response) from None
            except httpx.TransportError as exc:
                raise MasterUnreachableError(self.master_url, _describe(exc)) from None
        if name and self._token_source in ("saved", "login"):
            self.token_store.drop_token(self.master_url, name)
        self._token, self._token_source = None, "none"

    def adopt_token(self, token: str, *, save: bool = True, activate: bool = True) -> User:
        """Use ``token`` (an access token, or a session from single sign-on) from now on:
        ask the master whose it is and save it for that user.

        Args:
            token: the bearer token.
            save: save it in :attr:`token_store` under its user's name.
            activate: also make that user the master's active user there.

        Returns:
            The token's user.

        Raises:
            AuthenticationError: the master refuses the token (401).
        """
        if not isinstance(token, str) or not token.strip():
            raise ValueError("token must be a non-empty string")
        self._token, self._token_source = token.strip(), "explicit"
        self._token_origin = "the token given"
        user = self.whoami()
        name = str(user.get("username"))
        self._token_source, self.username = "login", name
        if save:
            self.token_store.set_token(self.master_url, name, self._token, activate=activate)
        return user

    @property
    def token(self) -> str | None:
        """The bearer token in use (None before the first request or when signed out)."""
        return self._token

    def whoami(self) -> User:
        """``GET /me``: the user this session acts as."""
        return cast(User, self.get_json("/me")["user"])

    # -- users ---------------------------------------------------------------------------

    def list_users(self) -> list[User]:
        """``GET /users``: every user."""
        return cast(list[User], self.get_json("/users")["users"])

    def get_user_by_name(self, username: str) -> User:
        """The user named ``username`` (looked up in ``GET /users``).

        Raises:
            APIError: 404 when there is no such user.
        """
        for user in self.list_users():
            if user.get("username") == username:
                return user
        raise APIError(404, f"user {username!r} not found")

    def create_user(
        self, username: str, password: str = "", admin: bool = False, remote: bool = False
    ) -> User:
        """``POST /users`` (administrators only): a new, active user; ``remote``: one who
        signs in only through single sign-on (no password).

        Raises:
            APIError: 403 for a non-administrator, 409 when the name is taken.
        """
        body: dict[str, Any] = {"username": username, "password": password, "admin": bool(admin)}
        if remote:
            body["remote"] = True
        return cast(User, self.post_json("/users", body)["user"])

    def patch_user(self, user_id: int, **fields: Any) -> User:
        """``PATCH /users/{id}`` with ``active``, ``admin``, ``display_name`` or
        ``agent_user_group`` (``{agent_uid, agent_gid, agent_user, agent_group}``, or
        None to unlink).

        Raises:
            ValueError: for another field name.
            APIError: 403 when not allowed, 400 for a bad value (naming the field).
        """
        _check_id("user_id", user_id)
        allowed = {"active", "admin", "display_name", "agent_user_group"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"cannot change {sorted(unknown)}; only {sorted(allowed)}")
        answer = _decode(self.request("PATCH", f"/users/{user_id}", json=fields))
        return cast(User, answer["user"])

    def link_with_agent_user(
        self, user_id: int, agent_uid: int, agent_gid: int, agent_user: str, agent_group: str
    ) -> User:
        """Link a user to a Unix identity (administrators; Determined's
        ``User.link_with_agent``): the user's tasks run as that uid, gid, user and group.

        Raises:
            APIError: 403 for a non-administrator, 400 for an out-of-range id or a bad
                name (the answer names the field).
        """
        link = {
            "agent_uid": agent_uid,
            "agent_gid": agent_gid,
            "agent_user": agent_user,
            "agent_group": agent_group,
        }
        return self.patch_user(user_id, agent_user_group=link)

    def set_password(self, user_id: int, password: str, old_password: str | None = None) -> None:
        """``POST /users/{id}/password``: set a password; every token of that user stops
        working (this session's too, when it is theirs: sign in again).

        Raises:
            APIError: 403 when not allowed (or the old password is wrong).
        """
        _check_id("user_id", user_id)
        body: dict[str, Any] = {"password": password}
        if old_password is not None:
            body["old_password"] = old_password
        self.post_json(f"/users/{user_id}/password", body)

    # -- master and agents -------------------------------------------------------------

    def master_info(self) -> MasterInfo:
        """``GET /master``: the master's version, cluster name and cluster id."""
        return cast(MasterInfo, self.get_json("/master"))

    def list_agents(self) -> list[Agent]:
        """``GET /agents``: every registered agent with its slots."""
        return cast(list[Agent], self.get_json("/agents")["agents"])

    # -- experiments -------------------------------------------------------------------

    def create_experiment(
        self,
        config: str | Mapping[str, Any],
        context: bytes | None = None,
        *,
        activate: bool = True,
        parent_id: int | None = None,
        project_id: int | None = None,
        template: str | None = None,
    ) -> CreatedExperiment:
        """``POST /experiments``: submit an experiment.

        Args:
            config: the experiment config as YAML text or a mapping.
            context: the context directory as gzipped tar bytes (see
                :func:`build_context_tarball`), or None to upload no code.
            activate: False to create the experiment paused.
            parent_id: fork: the experiment this one is forked from (its context is
                reused when ``context`` is None).
            project_id: the project to create it in (over the config's ``workspace``
                and ``project``; default: those, else Uncategorized).
            template: the name of a config template the master merges under
                ``config`` (``det template``; None: none).

        Returns:
            The created experiment (its ``id`` names it from now on); the master's
            warnings about deprecated or ignored config fields are under ``warnings``
            (a list of strings, often empty).

        Raises:
            TypeError: when ``config`` or ``context`` has the wrong type.
            APIError: 400 with field ``errors`` for a config the master rejects, 413 for a
                context over the master's limit.
        """
        form = self._experiment_form(config, context, activate, validate_only=False)
        if parent_id is not None:
            form["parent_id"] = (None, str(int(parent_id)))
        if project_id is not None:
            form["project_id"] = (None, str(int(project_id)))
        if template is not None:
            form["template"] = (None, str(template))
        answer = _decode(
            self.request(
                "POST",
                "/experiments",
                files=form,
                timeout=httpx.Timeout(self.timeout, write=self.upload_timeout),
            )
        )
        exp = dict(answer["experiment"])
        exp["warnings"] = list(answer.get("warnings") or [])
        return cast(CreatedExperiment, exp)

    def continue_experiment(
        self, experiment_id: int, override_config: str | Mapping[str, Any] | None = None
    ) -> Experiment:
        """``POST /experiments/continue``: continue a finished experiment.

        Args:
            experiment_id: the experiment.
            override_config: config fields to deep-merge in (YAML text or a mapping).

        Returns:
            The experiment.

        Raises:
            APIError: 404 unknown; 409 not finished or nothing to continue; 400 invalid
                overrides.
        """
        if isinstance(override_config, Mapping):
            override_config = yaml.safe_dump(dict(override_config), sort_keys=False)
        body: dict[str, Any] = {"id": int(experiment_id)}
        if override_config is not None:
            body["overrideConfig"] = override_config
        answer = _decode(self.request("POST", "/experiments/continue", json=body))
        return cast(Experiment, answer["experiment"])

    def validate_experiment(
        self, config: str | Mapping[str, Any], context: bytes | None = None
    ) -> dict[str, Any]:
        """``POST /experiments`` with ``validate_only``: check a config without creating.

        Args:
            config: the experiment config as YAML text or a mapping.
            context: optional gzipped tar bytes of the context directory.

        Returns:
            The master's answer.

        Raises:
            APIError: 400 with field ``errors`` when the config is invalid.
        """
        return cast(
            dict[str, Any],
            _decode(
                self.request(
                    "POST",
                    "/experiments",
                    files=self._experiment_form(config, context, True, validate_only=True),
                    timeout=httpx.Timeout(self.timeout, write=self.upload_timeout),
                )
            ),
        )

    @staticmethod
    def _experiment_form(
        config: str | Mapping[str, Any],
        context: bytes | None,
        activate: bool,
        validate_only: bool,
    ) -> dict[str, Any]:
        if isinstance(config, Mapping):
            text = yaml.safe_dump(dict(config), sort_keys=False)
        elif isinstance(config, str):
            text = config
        else:
            raise TypeError(f"config must be YAML text or a mapping, got {type(config).__name__}")
        # Every field goes as a multipart part ((None, value) = a plain form field).
        parts: dict[str, Any] = {
            "config": (None, text),
            "activate": (None, "true" if activate else "false"),
            "validate_only": (None, "true" if validate_only else "false"),
        }
        if context is not None:
            if not isinstance(context, (bytes, bytearray)):
                raise TypeError(f"context must be gzipped tar bytes, got {type(context).__name__}")
            parts["context"] = ("context.tar.gz", bytes(context), "application/gzip")
        return parts

    def list_experiments(
        self,
        archived: bool | None = False,
        limit: int = 100,
        offset: int = 0,
        *,
        fields: Sequence[str] | None = None,
        sort_by: str | None = None,
        order_by: str | None = None,
        **filters: Any,
    ) -> ExperimentPage:
        """``GET /experiments``: one page of a search across experiments
        (docs/protocol.md, "Searching experiments").

        Args:
            archived: True: archived only; False: unarchived only; None: both.
            limit: the page size (experiments), >= 1.
            offset: how many experiments to skip, >= 0.
            fields: answer only these columns of each experiment (``id`` always), e.g.
                ``["name", "state", "hp.lr"]``; None: the full experiments.
            sort_by: ``id`` (default), ``name``, ``state``, ``owner``, ``start_time``,
                ``end_time``, ``progress``, ``num_trials``, ``searcher``,
                ``best_searcher_metric``, ``project_id``, ``description`` or
                ``hp.<name>``.
            order_by: ``asc`` or ``desc`` (default).
            filters: any of :data:`EXPERIMENT_FILTERS`: ``workspace_id``,
                ``project_id``, ``name`` (part of it), ``start_after``,
                ``start_before``, ``end_after``, ``end_before`` (seconds since the
                epoch), and lists ``state``, ``owner``, ``label``, ``searcher``, ``hp``
                (``"lr>=0.001"``), ``best_metric`` (``"validation_loss<0.3"``).

        Returns:
            ``{"experiments": [...], "total": n}`` (``total``: how many matched).

        Raises:
            ValueError: for a limit below 1 or a negative offset.
            TypeError: for a filter not in :data:`EXPERIMENT_FILTERS`.
        """
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        unknown = sorted(set(filters) - set(EXPERIMENT_FILTERS))
        if unknown:
            raise TypeError(f"unknown experiment filters {unknown}; known: {EXPERIMENT_FILTERS}")
        params: dict[str, Any] = {
            "archived": "all" if archived is None else ("true" if archived else "false"),
            "limit": limit,
            "offset": offset,
        }
        params.update({k: v for k, v in filters.items() if v is not None and v != []})
        if fields is not None:
            params["fields"] = ",".join(fields)
        if sort_by is not None:
            params["sort_by"] = sort_by
        if order_by is not None:
            params["order_by"] = order_by
        return cast(ExperimentPage, self.get_json("/experiments", params))

    def iter_experiments(
        self,
        archived: bool | None = False,
        page_size: int = 100,
        *,
        fields: Sequence[str] | None = None,
        sort_by: str | None = None,
        order_by: str | None = None,
        **filters: Any,
    ) -> Iterator[Experiment]:
        """Every experiment of a search, fetched page by page.

        Args:
            archived, fields, sort_by, order_by, filters: as for
                :meth:`list_experiments`.
            page_size: experiments per request, >= 1.

        Yields:
            Experiments in the master's order.
        """
        offset = 0
        while True:
            page = self.list_experiments(
                archived=archived,
                limit=page_size,
                offset=offset,
                fields=fields,
                sort_by=sort_by,
                order_by=order_by,
                **filters,
            )
            items = page.get("experiments", [])
            yield from items
            offset += len(items)
            if not items or offset >= int(page.get("total", offset)):
                return

    def get_experiment(self, experiment_id: int) -> ExperimentDetail:
        """``GET /experiments/{id}``: the experiment and its trials."""
        _check_id("experiment_id", experiment_id)
        return cast(ExperimentDetail, self.get_json(f"/experiments/{experiment_id}"))

    def get_experiment_trials(self, experiment_id: int) -> list[Trial]:
        """``GET /experiments/{id}/trials``: the experiment's trials."""
        _check_id("experiment_id", experiment_id)
        return cast(list[Trial], self.get_json(f"/experiments/{experiment_id}/trials")["trials"])

    def get_experiment_checkpoints(self, experiment_id: int) -> list[Checkpoint]:
        """``GET /experiments/{id}/checkpoints``: the checkpoints of all its trials."""
        _check_id("experiment_id", experiment_id)
        answer = self.get_json(f"/experiments/{experiment_id}/checkpoints")
        return cast(list[Checkpoint], answer["checkpoints"])

    def get_model_def(self, experiment_id: int) -> bytes:
        """``GET /experiments/{id}/model_def``: the uploaded context as gzipped tar bytes."""
        _check_id("experiment_id", experiment_id)
        return self.request("GET", f"/experiments/{experiment_id}/model_def").content

    # -- trials ------------------------------------------------------------------------

    def get_trial(self, trial_id: int) -> Trial:
        """``GET /trials/{id}``: one trial."""
        _check_id("trial_id", trial_id)
        return cast(Trial, self.get_json(f"/trials/{trial_id}")["trial"])

    def get_trial_metrics(self, trial_id: int, group: str | None = None) -> list[Metric]:
        """``GET /trials/{id}/metrics``: metric reports ordered by ``total_batches``.

        Args:
            trial_id: the trial.
            group: ``"training"``, ``"validation"``, or None for both.

        Raises:
            ValueError: for another ``group``.
        """
        _check_id("trial_id", trial_id)
        if group not in (None, "training", "validation"):
            raise ValueError(f"group must be 'training', 'validation' or None, got {group!r}")
        # In pages of METRICS_PAGE batch counts (the cursor is ``total_batches``), so no
        # one answer holds a long trial's every report.
        out: list[Metric] = []
        cursor: int | None = -1
        while cursor is not None:
            answer = self.get_json(
                f"/trials/{trial_id}/metrics",
                {"group": group, "after_batches": cursor, "limit": METRICS_PAGE},
            )
            out += cast(list[Metric], answer["metrics"])
            cursor = answer.get("next_after_batches")
        return out

    def get_trial_logs(self, trial_id: int, after_id: int = 0, limit: int = 1000) -> TrialLogs:
        """``GET /trials/{id}/logs``: log lines with ``id > after_id``.

        Args:
            trial_id: the trial.
            after_id: the id of the last line already seen (0 for the start).
            limit: at most this many lines (>= 1).

        Returns:
            ``{"logs": [...], "trial_state": "..."}``.

        Raises:
            ValueError: for a negative ``after_id`` or a ``limit`` below 1.
        """
        _check_id("trial_id", trial_id)
        if after_id < 0:
            raise ValueError(f"after_id must be >= 0, got {after_id}")
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        params = {"after_id": after_id, "limit": limit}
        return cast(TrialLogs, self.get_json(f"/trials/{trial_id}/logs", params))

    def get_trial_checkpoints(self, trial_id: int) -> list[Checkpoint]:
        """``GET /trials/{id}/checkpoints``: the trial's checkpoints."""
        _check_id("trial_id", trial_id)
        answer = self.get_json(f"/trials/{trial_id}/checkpoints")
        return cast(list[Checkpoint], answer["checkpoints"])

    # -- checkpoints -------------------------------------------------------------------

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        """``GET /checkpoints/{uuid}``: one checkpoint.

        Raises:
            ValueError: when ``uuid`` is empty.
        """
        if not isinstance(uuid, str) or not uuid.strip():
            raise ValueError(f"uuid must be a non-empty string, got {uuid!r}")
        answer = self.get_json(f"/checkpoints/{quote(uuid.strip(), safe='')}")
        return cast(Checkpoint, answer["checkpoint"])

    def download_checkpoint(self, uuid: str) -> bytes:
        """``GET /checkpoints/{uuid}/download``: the checkpoint directory as a gzipped tar.

        Raises:
            ValueError: when ``uuid`` is empty.
        """
        if not isinstance(uuid, str) or not uuid.strip():
            raise ValueError(f"uuid must be a non-empty string, got {uuid!r}")
        r = self.request(
            "GET",
            f"/checkpoints/{quote(uuid.strip(), safe='')}/download",
            timeout=self.upload_timeout,
        )
        return r.content

    def download_checkpoint_to(self, uuid: str, path: str | os.PathLike[str]) -> list[SkippedEntry]:
        """Download a checkpoint and unpack it into directory ``path`` (created if
        missing), never writing outside it (:func:`dauntless.client.extract_archive`).

        Returns:
            The archive entries left out (links leaving the directory, absolute paths,
            device files), each with the reason; empty when every file was written.

        Raises:
            ValueError: when ``uuid`` is empty.
            tarfile.TarError: the master's answer is not a tar archive.
            OSError: a file cannot be written.
        """
        return extract_archive(self.download_checkpoint(uuid), path)

    # -- lifecycle ---------------------------------------------------------------------

    def experiment_action(self, experiment_id: int, action: str) -> dict[str, Any]:
        """``POST /experiments/{id}/{action}``: pause, activate, cancel, kill, archive or
        unarchive. Returns the experiment.

        Raises:
            ValueError: an unknown action.
            APIError: 409 when the experiment's state forbids it.
        """
        actions = ("pause", "activate", "cancel", "kill", "archive", "unarchive")
        if action not in actions:
            raise ValueError(f"action must be one of {actions}, got {action!r}")
        _check_id("experiment_id", experiment_id)
        return self.post_json(f"/experiments/{experiment_id}/{action}")["experiment"]

    def patch_experiment(self, experiment_id: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """``PATCH /experiments/{id}``: name, description or ``checkpoint_storage`` GC counts."""
        _check_id("experiment_id", experiment_id)
        return _decode(self.request("PATCH", f"/experiments/{experiment_id}", json=dict(body)))[
            "experiment"
        ]

    def delete_experiment(self, experiment_id: int) -> None:
        """``DELETE /experiments/{id}``: its checkpoints, then every record."""
        _check_id("experiment_id", experiment_id)
        self.request("DELETE", f"/experiments/{experiment_id}")

    def set_agent_enabled(
        self, agent_id: str, enabled: bool, drain: bool = False
    ) -> dict[str, Any]:
        """``POST /agents/{id}/enable|disable``; ``drain`` lets running trials finish."""
        path = f"/agents/{quote(agent_id, safe='')}/{'enable' if enabled else 'disable'}"
        return self.post_json(path, None if enabled else {"drain": drain})["agent"]

    def set_slot_enabled(self, agent_id: str, slot_id: str, enabled: bool) -> dict[str, Any]:
        """``POST /agents/{id}/slots/{slot}/enable|disable``."""
        path = (
            f"/agents/{quote(agent_id, safe='')}/slots/{quote(slot_id, safe='')}/"
            f"{'enable' if enabled else 'disable'}"
        )
        return self.post_json(path)["agent"]

    def list_resource_pools(self) -> list[dict[str, Any]]:
        """``GET /resource-pools``: pools with their slot counts."""
        return self.get_json("/resource-pools")["resource_pools"]

    def kill_trial(self, trial_id: int) -> dict[str, Any]:
        """``POST /trials/{id}/kill``. Returns the trial."""
        _check_id("trial_id", trial_id)
        return self.post_json(f"/trials/{trial_id}/kill")["trial"]


def _check_number(name: str, value: Any, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0 seconds, got {value}")
    if not positive and value < 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {value}")


def _check_id(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        return False


def _sent(exc: httpx.TransportError) -> bool:
    """Whether a request that failed with ``exc`` may have reached the master (False
    when the connection could not be opened)."""
    return not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))


def _describe(exc: httpx.TransportError) -> str:
    text = str(exc).strip()
    if isinstance(exc, httpx.ConnectError):
        lowered = text.lower()
        if "refused" in lowered:
            return "connection refused"
        if "name or service" in lowered or "nodename" in lowered or "resolve" in lowered:
            return f"unknown host: {text}"
        return text or "connection failed"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return text or type(exc).__name__


def _api_error(response: httpx.Response) -> APIError:
    try:
        body = response.json()
    except ValueError:
        body = None
    text = response.text.strip().splitlines()[0][:300] if response.text.strip() else ""
    fallback = text or response.reason_phrase or f"HTTP {response.status_code}"
    return APIError.from_body(response.status_code, body, fallback)


def _decode(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise APIError(
            response.status_code,
            f"the master answered {response.request.method} {response.request.url.path} "
            "with a body that is not JSON",
        ) from None
