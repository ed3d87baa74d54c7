from django.urls import path

from rental.views import agent, approvals, capacity, images, leases, pools, projects, volumes

app_name = "rental"
urlpatterns = [
    path("leases/", leases.lease_list, name="leases"),
    path("leases/_list/", leases.lease_list_partial, name="lease_list_partial"),
    path("leases/new/", leases.lease_new, name="lease_new"),
    path("leases/estimate/", leases.lease_estimate, name="lease_estimate"),
    path("leases/<int:pk>/", leases.lease_detail, name="lease"),
    path("leases/<int:pk>/_status/", leases.lease_status_partial, name="lease_status_partial"),
    path("leases/<int:pk>/end/", leases.lease_end, name="lease_end"),
    path("leases/<int:pk>/extend/", capacity.lease_extend, name="lease_extend"),
    path(
        "leases/<int:pk>/extension/",
        capacity.lease_extension_decide,
        name="lease_extension_decide",
    ),
    path("leases/<int:pk>/watch/", capacity.lease_watch, name="lease_watch"),
    path("leases/<int:pk>/reschedule/", capacity.lease_reschedule, name="lease_reschedule"),
    path(
        "projects/<slug:slug>/quota-requests/",
        capacity.quota_request_new,
        name="quota_request_new",
    ),
    path(
        "projects/<slug:slug>/quotas/<int:pk>/auto-approve/",
        capacity.quota_auto_approve,
        name="quota_auto_approve",
    ),
    path(
        "projects/<slug:slug>/quotas/<int:pk>/auto-approve-caps/",
        capacity.quota_auto_approve_caps,
        name="quota_auto_approve_caps",
    ),
    path(
        "quota-requests/<int:pk>/decide/",
        capacity.quota_request_decide,
        name="quota_request_decide",
    ),
    path(
        "leases/<int:pk>/instances/<int:instance_pk>/still-using/",
        agent.still_using,
        name="still_using",
    ),
    path(
        "leases/<int:pk>/instances/<int:instance_pk>/replace/",
        agent.replace_instance,
        name="replace_instance",
    ),
    path("leases/<int:pk>/stop/", agent.lease_stop, name="lease_stop"),
    path("leases/<int:pk>/resume/", agent.lease_resume, name="lease_resume"),
    path("leases/<int:pk>/end-stopped/", agent.lease_end_stopped, name="lease_end_stopped"),
    path("images/", images.image_list, name="images"),
    path("leases/<int:pk>/save-image/", images.lease_save_image, name="lease_save_image"),
    path("keys/", agent.ssh_keys, name="ssh_keys"),
    path("keys/<int:pk>/delete/", agent.ssh_key_delete, name="ssh_key_delete"),
    path("approvals/", approvals.approvals, name="approvals"),
    path("approvals/_count/", approvals.approvals_count, name="approvals_count"),
    path("approvals/<int:pk>/approve/", approvals.lease_approve, name="lease_approve"),
    path("approvals/<int:pk>/reject/", approvals.lease_reject, name="lease_reject"),
    path("projects/", projects.project_list, name="projects"),
    path("projects/<slug:slug>/", projects.project_detail, name="project"),
    path("projects/<slug:slug>/volumes/", volumes.project_volumes, name="project_volumes"),
    path(
        "projects/<slug:slug>/volumes/<int:pk>/delete/",
        volumes.volume_delete,
        name="volume_delete",
    ),
    path("pools/", pools.pool_list, name="pools"),
    path("pools/<int:pk>/", pools.pool_detail, name="pool"),
    path("pools/<int:pk>/_queue/", pools.pool_queue, name="pool_queue"),
    path("pools/<int:pk>/settings/", pools.pool_settings, name="pool_settings"),
    path("pools/<int:pk>/degraded/", pools.pool_degraded, name="pool_degraded"),
    path(
        "pools/<int:pk>/offerings/<int:offering_pk>/",
        pools.offering_terms,
        name="offering_terms",
    ),
    path("panels/leases/", projects.panel_leases, name="panel_leases"),
    path("panels/approvals/", projects.panel_approvals, name="panel_approvals"),
]
