from django.urls import path

from billing import allocation_views, reconcile_views, spend_views, views

app_name = "billing"
urlpatterns = [
    path("projects/<slug:slug>/statement/", views.statement, name="statement"),
    path(
        "projects/<slug:slug>/statement/_lines/",
        spend_views.statement_partial,
        name="statement_partial",
    ),
    path(
        "projects/<slug:slug>/statement/<str:period>/lines/<int:index>/",
        views.line_detail,
        name="line",
    ),
    path("projects/<slug:slug>/reports/", views.reports, name="reports"),
    path("projects/<slug:slug>/budget/", spend_views.budget_set, name="budget_set"),
    path(
        "projects/<slug:slug>/allocations/",
        allocation_views.allocations_page,
        name="allocations",
    ),
    path(
        "projects/<slug:slug>/allocations/remove/",
        allocation_views.allocation_remove,
        name="allocation_remove",
    ),
    path("statements/<int:pk>/approve/", views.statement_approve, name="statement_approve"),
    path("lines/<int:pk>/dispute/", views.line_dispute, name="line_dispute"),
    path("disputes/<int:pk>/answer/", views.dispute_answer, name="dispute_answer"),
    path("finance/", views.finance, name="finance"),
    path("finance/reconcile/", reconcile_views.reconcile_page, name="reconcile"),
    path("finance/reconcile/<int:pk>/", reconcile_views.import_page, name="reconcile_import"),
    path(
        "finance/reconcile/<int:pk>/acknowledge/",
        reconcile_views.acknowledge,
        name="reconcile_acknowledge",
    ),
    path(
        "finance/reconcile/items/<int:pk>/correct/",
        reconcile_views.correct,
        name="reconcile_correct",
    ),
    path("leases/<int:pk>/_cost/", spend_views.lease_cost_partial, name="lease_cost"),
    path("panels/spend/", spend_views.panel_spend, name="panel_spend"),
]
