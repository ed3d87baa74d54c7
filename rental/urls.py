from django.urls import path

from rental import agent_views, capacity_views, image_views, views, volume_views

app_name = "rental"
urlpatterns = [
    path("leases/", views.lease_list, name="leases"),
    path("leases/_list/", views.lease_list_partial, name="lease_list_partial"),
    path("leases/new/", views.lease_new, name="lease_new"),
    path("leases/estimate/", views.lease_estimate, name="lease_estimate"),
    path("leases/<int:pk>/", views.lease_detail, name="lease"),
    path("leases/<int:pk>/_status/", views.lease_status_partial, name="lease_status_partial"),
    path("leases/<int:pk>/end/", views.lease_end, name="lease_end"),
    path("leases/<int:pk>/extend/", capacity_views.lease_extend, name="lease_extend"),
    path(
        "leases/<int:pk>/extension/",
        capacity_views.lease_extension_decide,
        name="lease_extension_decide",
    ),
    path("leases/<int:pk>/watch/", capacity_views.lease_watch, name="lease_watch"),
    path("leases/<int:pk>/reschedule/", capacity_views.lease_reschedule, name="lease_reschedule"),
    path(
        "projects/<slug:slug>/quota-requests/",
        capacity_views.quota_request_new,
        name="quota_request_new",
    ),
    path(
        "projects/<slug:slug>/quotas/<int:pk>/auto-approve/",
        capacity_views.quota_auto_approve,
        name="quota_auto_approve",
    ),
    path(
        "projects/<slug:slug>/quotas/<int:pk>/auto-approve-caps/",
        capacity_views.quota_auto_approve_caps,
        name="quota_auto_approve_caps",
    ),
    path(
        "quota-requests/<int:pk>/decide/",
        capacity_views.quota_request_decide,
        name="quota_request_decide",
    ),
    path(
        "leases/<int:pk>/instances/<int:instance_pk>/still-using/",
        agent_views.still_using,
        name="still_using",
    ),
    path(
        "leases/<int:pk>/instances/<int:instance_pk>/replace/",
        agent_views.replace_instance,
        name="replace_instance",
    ),
    path("leases/<int:pk>/stop/", agent_views.lease_stop, name="lease_stop"),
    path("leases/<int:pk>/resume/", agent_views.lease_resume, name="lease_resume"),
    path("leases/<int:pk>/end-stopped/", agent_views.lease_end_stopped, name="lease_end_stopped"),
    path("images/", image_views.image_list, name="images"),
    path("leases/<int:pk>/save-image/", image_views.lease_save_image, name="lease_save_image"),
    path("keys/", agent_views.ssh_keys, name="ssh_keys"),
    path("keys/<int:pk>/delete/", agent_views.ssh_key_delete, name="ssh_key_delete"),
    path("approvals/", views.approvals, name="approvals"),
    path("approvals/_count/", views.approvals_count, name="approvals_count"),
    path("approvals/<int:pk>/approve/", views.lease_approve, name="lease_approve"),
    path("approvals/<int:pk>/reject/", views.lease_reject, name="lease_reject"),
    path("projects/", views.project_list, name="projects"),
    path("projects/<slug:slug>/", views.project_detail, name="project"),
    path("projects/<slug:slug>/volumes/", volume_views.project_volumes, name="project_volumes"),
    path(
        "projects/<slug:slug>/volumes/<int:pk>/delete/",
        volume_views.volume_delete,
        name="volume_delete",
    ),
    path("pools/", capacity_views.pool_list, name="pools"),
    path("pools/<int:pk>/", capacity_views.pool_detail, name="pool"),
    path("panels/leases/", views.panel_leases, name="panel_leases"),
    path("panels/approvals/", views.panel_approvals, name="panel_approvals"),
]
