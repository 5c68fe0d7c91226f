"""formloop.evaluate"""
