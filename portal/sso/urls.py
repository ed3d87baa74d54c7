from django.urls import path

from portal.sso import views

app_name = "sso"

urlpatterns = [
    path("sign-in/", views.SignIn.as_view(), name="sign_in"),
    path("callback/", views.Callback.as_view(), name="callback"),
]
