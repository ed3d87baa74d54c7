app_name = "rental"
urlpatterns: list = []
