"""Errors of the cache domain (regions and entries); the shared bases are in
``common.errors``."""

from common.errors import DomainError


class NoSuchRegionError(DomainError):
    code = "no_such_region"
    status = 404


class RegionExistsError(DomainError):
    code = "region_exists"
    status = 409
