"""formloop.sol"""
