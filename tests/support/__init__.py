"""Helpers shared by the test tiers (tests/engine, tests/api, tests/browser, tests/fidelity): scenario
builders, hypothesis strategies, the browser tier's page helpers. No test module imports another; they
import from here."""
