from django.urls import path

from portal.messaging import views

app_name = "messaging"

urlpatterns = [
    path("projects/<slug:slug>/channels/", views.channels, name="channels"),
    path("projects/<slug:slug>/channels/<int:pk>/test/", views.channel_test, name="channel_test"),
    path(
        "projects/<slug:slug>/channels/<int:pk>/remove/",
        views.channel_remove,
        name="channel_remove",
    ),
    path("subscriptions/", views.subscription_list, name="subscriptions"),
    path("subscriptions/<int:pk>/", views.subscription_save, name="subscription_save"),
]
