"""Errors of the cache domain (regions and entries); the shared bases are in
``common.errors``."""

from common.errors import DomainError


class NoSuchRegionError(DomainError):
    code = "no_such_region"
    status = 404


class RegionExistsError(DomainError):
    code = "region_exists"
    status = 409


class SinceTooOldError(DomainError):
    """A ``since`` below what the region's tombstones still cover: the
    client registers without ``since`` for a full image."""

    code = "since_too_old"
    status = 409
