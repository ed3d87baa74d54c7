app_name = "billing"
urlpatterns: list = []
