"""Access-matrix rules for the web pages, the agent endpoint and the API's shell (schema,
docs, me).

ROLES order: engineer (alice, alpha), other_engineer (bob, beta), manager (alma, alpha),
admin, finance, anonymous. Web pages send anonymous visitors to the login page (302);
a page about an object outside the user's reach is 404. POST-only pages answer GET with
405 (anonymous: 302). An empty POST by someone who may act is refused by validation or
rule (the page again with the refusal inside its form: 400, or 409 for a rule), or does
the one thing the action means (302 back to the page).
"""

from billing.reconcile_models import CostImport, CostImportItem
from tests.access import world as w
from tests.access.spec import Expect

EVERYONE = (200, 200, 200, 200, 200, 302)
MEMBERS_AND_SITE = (200, 404, 200, 200, 200, 302)  # alpha's object: not bob
MANAGERS = (404, 404, 200, 200, 404, 302)
ADMINS = (404, 404, 404, 200, 404, 302)
POST_ONLY = (405, 405, 405, 405, 405, 302)


def lease(world) -> dict:
    return {"pk": world.lease.pk}


def other_lease(world) -> dict:
    return {"pk": world.other_lease.pk}


def project(world) -> dict:
    return {"slug": world.project.slug}


def other_project(world) -> dict:
    return {"slug": world.other_project.slug}


def instance(world) -> dict:
    made = world.once("instance", lambda: w.instance_of(world.lease))
    return {"pk": world.lease.pk, "instance_pk": made.pk}


def other_instance(world) -> dict:
    made = world.once("other_instance", lambda: w.instance_of(world.other_lease))
    return {"pk": world.other_lease.pk, "instance_pk": made.pk}


def quota_request(world) -> dict:
    made = world.once(
        "quota_request", lambda: w.quota_request_of(world.project, world.users["engineer"])
    )
    return {"pk": made.pk}


def other_quota_request(world) -> dict:
    made = world.once(
        "other_quota_request", lambda: w.quota_request_of(world.other_project, world.f0.gary)
    )
    return {"pk": made.pk}


def ssh_key(world) -> dict:
    return {"pk": world.once("key", lambda: w.ssh_key_of(world.users["engineer"])).pk}


def volume(world) -> dict:
    made = world.once("volume", lambda: w.volume_of(world.project))
    return {"slug": world.project.slug, "pk": made.pk}


def other_volume(world) -> dict:
    made = world.once("other_volume", lambda: w.volume_of(world.other_project))
    return {"slug": world.other_project.slug, "pk": made.pk}


def statement(world):
    return world.once("statement", lambda: w.statement_of(world.project))


def other_statement(world):
    return world.once("other_statement", lambda: w.statement_of(world.other_project))


def line_of(world, which) -> dict:
    made = which(world)[0]
    return {"slug": made.project.slug, "period": f"{made.period:%Y-%m}", "index": 0}


def bill_item(world):
    """A provider bill import with one flagged item (billing.reconcile)."""

    def make():
        made = CostImport.objects.create(
            period="2026-03-01",
            file_name="cur.csv",
            format="cur_csv",
            currency="USD",
            threshold_percent="0.5",
            status="review",
            flagged_count=1,
        )
        return CostImportItem.objects.create(
            cost_import=made, resource_id="i-0access", finding="unknown", flagged=True
        )

    return world.once("bill_item", make)


RULES: dict[str, Expect] = {
    # --- The site shell (portal) -----------------------------------------------------------
    "dashboard": Expect(get=EVERYONE),
    "login": Expect(
        get=(302, 302, 302, 302, 302, 200),
        post=(302, 302, 302, 302, 302, 200),  # an empty form is answered with its errors
        note="Public; a signed-in user is sent on to the dashboard.",
    ),
    "logout": Expect(get=(405,) * 6, post=(302,) * 6),
    "notifications": Expect(get=EVERYONE),
    "notifications_read": Expect(get=POST_ONLY, post=(302,) * 6),
    "audit_log": Expect(get=ADMINS),
    "set_language": Expect(get=(302,) * 6, post=(302,) * 6, note="Public: sets a cookie."),
    # --- The operator's endpoints (portal.operator_views) ---------------------------------
    "healthz": Expect(get=(200,) * 6, note="Public: a liveness probe; says only that it runs."),
    "readyz": Expect(
        get=((200, 503),) * 6,  # this world has no beat heartbeat: 503, naming "beat"
        note="Public: a readiness probe; check names and plain words, no data or hosts.",
    ),
    "metrics": Expect(
        get=(200,) * 6,
        note="By scraper, never by role: the bearer token or an allowed address (the test "
        "client's 127.0.0.1 is allowed outside production); tests/portal/test_metrics.py.",
    ),
    # --- The API's shell --------------------------------------------------------------------
    "agent_heartbeat": Expect(
        get=(405, 405, 405, 405, 405, 405),
        post=(401,) * 6,
        note="Only an instance's own agent token is accepted; a person's session is not.",
    ),
    "api:me": Expect(get=(200, 200, 200, 200, 200, 401)),
    # The API's description is public, like any published API reference; it holds no data.
    "api_schema": Expect(get=(200,) * 6),
    "api_docs": Expect(get=(200,) * 6),
    "api_redoc": Expect(get=(200,) * 6),
    # --- Leases -----------------------------------------------------------------------------
    "rental:leases": Expect(get=EVERYONE),
    "rental:lease_list_partial": Expect(get=EVERYONE),
    "rental:lease_new": Expect(get=EVERYONE, post=(400, 400, 400, 400, 400, 302)),
    "rental:lease_estimate": Expect(
        get=POST_ONLY,
        post=(200, 200, 200, 404, 404, 302),
        note="Members estimate a request for their projects; who is a member of none gets 404.",
    ),
    "rental:lease": Expect(get=MEMBERS_AND_SITE, kwargs=lease, outsider_kwargs=other_lease),
    "rental:lease_status_partial": Expect(
        get=MEMBERS_AND_SITE, kwargs=lease, outsider_kwargs=other_lease
    ),
    "rental:lease_end": Expect(
        get=POST_ONLY,
        post=(302, 404, 302, 302, 404, 302),
        kwargs=lease,
        outsider_kwargs=other_lease,
        note="The requester, the project's managers and admins end (here: cancel) a lease.",
    ),
    "rental:lease_extend": Expect(
        get=POST_ONLY,
        post=(400, 404, 400, 400, 404, 302),  # the lease page again, the hours' field error
        kwargs=lease,
        outsider_kwargs=other_lease,
    ),
    "rental:lease_reschedule": Expect(
        get=POST_ONLY,
        post=(400, 404, 400, 400, 404, 302),  # the lease page again, with the form's errors
        kwargs=lease,
        outsider_kwargs=other_lease,
    ),
    "rental:lease_extension_decide": Expect(
        get=POST_ONLY,
        post=(404, 404, 409, 409, 404, 302),  # no extension waits: said in the form
        kwargs=lease,
        outsider_kwargs=other_lease,
    ),
    "rental:lease_watch": Expect(
        get=POST_ONLY,
        post=(302, 404, 302, 302, 404, 302),
        kwargs=lease,
        outsider_kwargs=other_lease,
    ),
    "rental:still_using": Expect(
        get=POST_ONLY,
        post=(302, 404, 302, 302, 404, 302),
        kwargs=instance,
        outsider_kwargs=other_instance,
    ),
    "rental:replace_instance": Expect(
        get=POST_ONLY,
        post=(302, 404, 302, 302, 404, 302),
        kwargs=instance,
        outsider_kwargs=other_instance,
    ),
    "rental:lease_stop": Expect(
        get=POST_ONLY,
        post=(302, 404, 302, 302, 404, 302),
        kwargs=lease,
        outsider_kwargs=other_lease,
    ),
    "rental:lease_resume": Expect(
        get=POST_ONLY,
        post=(302, 404, 302, 302, 404, 302),
        kwargs=lease,
        outsider_kwargs=other_lease,
    ),
    "rental:lease_end_stopped": Expect(
        get=POST_ONLY,
        post=(302, 404, 302, 302, 404, 302),
        kwargs=lease,
        outsider_kwargs=other_lease,
    ),
    "rental:lease_save_image": Expect(
        get=POST_ONLY,
        post=(400, 404, 400, 400, 404, 302),  # the lease page again: the name is missing
        kwargs=lease,
        outsider_kwargs=other_lease,
    ),
    # --- Approvals --------------------------------------------------------------------------
    "rental:approvals": Expect(get=MANAGERS),
    "rental:approvals_count": Expect(get=EVERYONE),
    "rental:lease_approve": Expect(
        get=POST_ONLY,
        post=(404, 404, 302, 302, 404, 302),
        kwargs=lease,
        outsider_kwargs=other_lease,
    ),
    "rental:lease_reject": Expect(
        get=POST_ONLY,
        post=(404, 404, 400, 400, 404, 302),  # a rejection says why: the comment's error
        kwargs=lease,
        outsider_kwargs=other_lease,
    ),
    # --- Capacity ---------------------------------------------------------------------------
    "rental:quota_request_new": Expect(
        get=POST_ONLY,
        post=(400, 404, 400, 404, 404, 302),  # the project page again, with the form's errors
        note="Members of the project ask for a quota change; admins decide, they do not ask.",
        kwargs=project,
        outsider_kwargs=other_project,
    ),
    "rental:quota_request_decide": Expect(
        get=POST_ONLY,
        post=(404, 404, 400, 400, 404, 302),  # a rejection says why: the comment's error
        kwargs=quota_request,
        outsider_kwargs=other_quota_request,
    ),
    "rental:pools": Expect(get=EVERYONE),
    "rental:pool": Expect(get=EVERYONE, kwargs=lambda world: {"pk": world.f0.pool.pk}),
    "rental:pool_queue": Expect(get=EVERYONE, kwargs=lambda world: {"pk": world.f0.pool.pk}),
    "rental:pool_settings": Expect(
        get=POST_ONLY,
        post=(404, 404, 404, 400, 404, 302),  # an empty form: the capacity's field error
        kwargs=lambda world: {"pk": world.f0.pool.pk},
        note="Admins configure pools on the pool page; to anyone else it does not exist.",
    ),
    "rental:pool_degraded": Expect(
        get=POST_ONLY,
        post=(404, 404, 404, 400, 404, 302),  # marking needs a reason
        kwargs=lambda world: {"pk": world.f0.pool.pk},
    ),
    "rental:offering_terms": Expect(
        get=POST_ONLY,
        post=(404, 404, 404, 400, 404, 302),  # an empty form: the on-demand price's error
        kwargs=lambda world: {"pk": world.f0.pool.pk, "offering_pk": world.f0.offering.pk},
    ),
    # --- Images, keys, projects, volumes ----------------------------------------------------
    "rental:images": Expect(get=EVERYONE),
    "rental:ssh_keys": Expect(get=EVERYONE, post=(200, 200, 200, 200, 200, 302)),
    "rental:ssh_key_delete": Expect(
        get=POST_ONLY,
        post=(302, 404, 404, 404, 404, 302),
        kwargs=ssh_key,
        note="Only the key's owner deletes it.",
    ),
    "rental:projects": Expect(get=EVERYONE),
    "rental:project": Expect(get=MEMBERS_AND_SITE, kwargs=project, outsider_kwargs=other_project),
    "rental:project_volumes": Expect(
        get=MEMBERS_AND_SITE,
        post=(400, 404, 400, 404, 404, 302),  # an empty form: its field errors
        note="Everyone who sees the project sees its volumes; its members create them.",
        kwargs=project,
        outsider_kwargs=other_project,
    ),
    "rental:volume_delete": Expect(
        get=POST_ONLY,
        post=(200, 404, 200, 404, 404, 302),  # the volumes section, re-rendered (HTMX)
        kwargs=volume,
        outsider_kwargs=other_volume,
    ),
    # --- Dashboard panels -------------------------------------------------------------------
    "rental:panel_leases": Expect(get=EVERYONE),
    "rental:panel_approvals": Expect(get=EVERYONE),
    "billing:panel_spend": Expect(get=EVERYONE),
    # --- Billing ----------------------------------------------------------------------------
    "billing:statement": Expect(
        get=MEMBERS_AND_SITE, kwargs=project, outsider_kwargs=other_project
    ),
    "billing:statement_partial": Expect(
        get=MEMBERS_AND_SITE, kwargs=project, outsider_kwargs=other_project
    ),
    "billing:line": Expect(
        get=MEMBERS_AND_SITE,
        kwargs=lambda world: line_of(world, statement),
        outsider_kwargs=lambda world: line_of(world, other_statement),
    ),
    "billing:reports": Expect(get=MEMBERS_AND_SITE, kwargs=project, outsider_kwargs=other_project),
    "billing:budget_set": Expect(
        get=POST_ONLY,
        post=(404, 404, 400, 400, 404, 302),  # the project page again: the amount's error
        kwargs=project,
        outsider_kwargs=other_project,
    ),
    "billing:allocations": Expect(
        get=MANAGERS,
        post=(404, 404, 400, 400, 404, 302),  # the page again: the GPU model's error
        kwargs=project,
        outsider_kwargs=other_project,
    ),
    "billing:allocation_remove": Expect(
        get=POST_ONLY,
        post=(404, 404, 302, 302, 404, 302),  # back to the page, saying what is missing
        kwargs=project,
        outsider_kwargs=other_project,
    ),
    "billing:statement_approve": Expect(
        get=POST_ONLY,
        post=(404, 404, 302, 302, 404, 302),
        kwargs=lambda world: {"pk": statement(world)[0].pk},
        outsider_kwargs=lambda world: {"pk": other_statement(world)[0].pk},
    ),
    "billing:line_dispute": Expect(
        get=POST_ONLY,
        post=(404, 404, 400, 400, 404, 302),  # the statement page again: the comment's error
        kwargs=lambda world: {"pk": statement(world)[1].pk},
        outsider_kwargs=lambda world: {"pk": other_statement(world)[1].pk},
    ),
    "billing:dispute_answer": Expect(
        get=POST_ONLY,
        post=(404, 404, 404, 400, 404, 302),  # the statement page again: the answer's error
        kwargs=lambda world: {"pk": statement(world)[2].pk},
    ),
    "billing:finance": Expect(get=(404, 404, 404, 200, 200, 302)),
    # Reconciliation with the provider's bill: finance and admins; an empty form is refused.
    "billing:reconcile": Expect(
        get=(404, 404, 404, 200, 200, 302), post=(404, 404, 404, 400, 400, 302)
    ),
    "billing:reconcile_import": Expect(
        get=(404, 404, 404, 200, 200, 302),
        kwargs=lambda world: {"pk": bill_item(world).cost_import_id},
    ),
    "billing:reconcile_acknowledge": Expect(
        get=POST_ONLY,
        post=(404, 404, 404, 400, 400, 302),  # the import page again: the note's error
        kwargs=lambda world: {"pk": bill_item(world).cost_import_id},
    ),
    "billing:reconcile_correct": Expect(
        get=POST_ONLY,
        post=(404, 404, 404, 400, 400, 302),  # the import page again: the amount's error
        kwargs=lambda world: {"pk": bill_item(world).pk},
    ),
    "billing:lease_cost": Expect(get=MEMBERS_AND_SITE, kwargs=lease, outsider_kwargs=other_lease),
}
