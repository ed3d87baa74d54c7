"""Page-number pagination: ``?page=N&page_size=M`` (at most 200), with the total count."""

from rest_framework.pagination import PageNumberPagination


class PortalPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
