from django.urls import path

from billing import views

app_name = "billing"
urlpatterns = [
    path("projects/<slug:slug>/statement/", views.statement, name="statement"),
    path(
        "projects/<slug:slug>/statement/_lines/",
        views.statement_partial,
        name="statement_partial",
    ),
    path("panels/spend/", views.panel_spend, name="panel_spend"),
]
