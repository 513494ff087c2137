"""The project's cc rules: every library, binary and test gets the one
warning list (copts.bzl); tests link GoogleTest's main unless they bring
their own."""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")
load("//tools:copts.bzl", "PFM_COPTS")

def pfm_cc_library(name, copts = [], **kwargs):
    """cc_library with the project's warnings."""
    cc_library(name = name, copts = PFM_COPTS + copts, **kwargs)

def pfm_cc_binary(name, copts = [], **kwargs):
    """cc_binary with the project's warnings."""
    cc_binary(name = name, copts = PFM_COPTS + copts, **kwargs)

def pfm_cc_test(name, deps = [], copts = [], gtest_main = True, **kwargs):
    """cc_test with the project's warnings and GoogleTest's main."""
    cc_test(
        name = name,
        copts = PFM_COPTS + copts,
        deps = deps + (["@system//:gtest_main"] if gtest_main else []),
        **kwargs
    )
