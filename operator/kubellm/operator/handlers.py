"""Kopf handlers: declare what triggers a reconcile pass and delegate to Reconciler.

Registered by ``register_handlers(config)`` (called by ``kubellm-operator`` before Kopf
starts) into Kopf's default registry: login, the reconciler's handlers and, through
``autoscaling.handlers.register_autoscaler``, the autoscaler's timer.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import kopf

from kubellm.operator.autoscaling.handlers import register_autoscaler
from kubellm.operator.builders.network_policy import NetworkPolicyDefaults
from kubellm.operator.builders.images import DEFAULT_ACTIVATOR_IMAGE, DEFAULT_EPP_IMAGE
from kubellm.operator.cache_loader import RetryPolicy
from kubellm.operator.builders.meta import MANAGED_BY_LABEL, MANAGER, owner_name
from kubellm.operator.kube import KubeClient
from kubellm.operator.resources import GROUP, PLURAL, VERSION, llmd_path
from kubellm.operator.reconcile import Reconciler

ANNOTATION_PREFIX = "kubellm.io"
RETRY_SECONDS = 5
TIMER_EXIT_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class OperatorConfig:
    default_image: str
    resync_seconds: float = 30.0
    reconcile: bool = True  # the LLMDeployment -> children controller
    autoscale: bool = True  # the queue-depth autoscaler's timer
    autoscaler_tick_seconds: float = 1.0
    network_policy: NetworkPolicyDefaults = field(default_factory=NetworkPolicyDefaults)
    cache_retry_seconds: float = 60.0  # first wait before a failed loader Job is retried
    epp_image: str = DEFAULT_EPP_IMAGE  # spec.routing's Endpoint Picker
    activator_image: str = DEFAULT_ACTIVATOR_IMAGE  # scale from zero (the operator's image)


class _State:
    reconciler: Reconciler | None = None


STATE = _State()
# Children whose changes trigger a pass at once (the resync timer catches the rest): a
# loader Job finishing starts the servers without waiting for the next resync.
CHILD_RESOURCES = (("apps", "v1", "deployments"), ("apps", "v1", "statefulsets"),
                   ("", "v1", "services"), ("networking.k8s.io", "v1", "networkpolicies"),
                   ("batch", "v1", "jobs"), ("policy", "v1", "poddisruptionbudgets"))


def register_handlers(config: OperatorConfig) -> None:
    llmd = (GROUP, VERSION, PLURAL)

    @kopf.on.startup(id="configure")
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Kopf's bookkeeping goes to our annotations; .status stays ours and the schema's.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix=ANNOTATION_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
        settings.posting.level = logging.WARNING  # Events for problems, not for every pass
        # Timers (resync, autoscaler) make Kopf hold a finalizer; name it after us.
        settings.persistence.finalizer = f"{ANNOTATION_PREFIX}/operator"
        # A deletion that finds a timer mid-pass waits for it to end: check again soon,
        # not after Kopf's default minute (the finalizer holds the object meanwhile).
        settings.background.cancellation_polling = TIMER_EXIT_POLL_SECONDS

    # Async, so the API client is made (and replaced on re-login) inside the event loop.
    @kopf.on.login(id="login")
    async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
        if info is None:
            raise kopf.LoginError("no in-cluster service account and no kubeconfig found")
        if STATE.reconciler is None:
            STATE.reconciler = Reconciler(
                KubeClient(info), config.default_image, config.network_policy,
                cache_retry=RetryPolicy(base_seconds=config.cache_retry_seconds),
                epp_image=config.epp_image, activator_image=config.activator_image)
        else:
            STATE.reconciler.client.update_credentials(info)
        return info

    @kopf.on.cleanup(id="close-client")
    async def close(**_: Any) -> None:
        if STATE.reconciler:
            await STATE.reconciler.client.close()

    if config.autoscale:
        register_autoscaler(config.autoscaler_tick_seconds, lambda: _reconciler().client)
    if not config.reconcile:
        return

    # Failures are transient API errors (a bad spec never raises): retry soon.
    @kopf.on.resume(*llmd, id="reconcile", backoff=RETRY_SECONDS)
    @kopf.on.create(*llmd, id="reconcile", backoff=RETRY_SECONDS)
    @kopf.on.update(*llmd, id="reconcile", backoff=RETRY_SECONDS)
    async def spec_changed(body: kopf.Body, **_: Any) -> None:
        await _reconciler().reconcile(dict(body))

    # Periodic pass: repairs drift the events missed and refreshes status.
    @kopf.timer(*llmd, id="resync", interval=config.resync_seconds,
                initial_delay=config.resync_seconds)
    async def resync(body: kopf.Body, **_: Any) -> None:
        await _reconciler().reconcile(dict(body))

    @kopf.on.delete(*llmd, id="cleanup", backoff=RETRY_SECONDS)
    async def deleted(body: kopf.Body, **_: Any) -> None:
        await _reconciler().cleanup(dict(body))

    for group, version, plural in CHILD_RESOURCES:
        kopf.on.event(group, version, plural, id=f"child-{plural}",
                      labels={MANAGED_BY_LABEL: MANAGER})(child_changed)


async def child_changed(body: kopf.Body, **_: Any) -> None:
    """A child was edited, deleted or changed status: reconcile its LLMDeployment."""
    owner = owner_name(dict(body))
    if owner is None:
        return
    reconciler = _reconciler()
    path = llmd_path(body["metadata"]["namespace"], owner)
    cr = await reconciler.client.get(path)
    if cr is not None and not cr["metadata"].get("deletionTimestamp"):
        await reconciler.reconcile(cr)


def _reconciler() -> Reconciler:
    if STATE.reconciler is None:
        raise kopf.TemporaryError("not logged in to the API server yet", delay=1)
    return STATE.reconciler
