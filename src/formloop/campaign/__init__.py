"""formloop.campaign"""
