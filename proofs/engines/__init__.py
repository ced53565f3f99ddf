"""Serving engines that loopcert starts itself to certify them (vLLM)."""
