"""URL wiring: admin, dashboard, the REST API, schema and metrics."""

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView

from durablecache import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz/", views.healthz, name="healthz"),
    path("metrics", views.metrics, name="metrics"),
    path("dashboard/", include("durablecache.dashboard_urls")),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/v1/", include("durablecache.cache.api.urls")),
    path("api/v1/", include("clients.api.urls")),
    # Every 4xx under /api/ carries the JSON error body, unknown paths too.
    re_path(r"^api/", views.api_not_found),
]
