from django.urls import path

from durablecache import dashboard

app_name = "dashboard"
urlpatterns = [
    path("", dashboard.overview, name="overview"),
]
