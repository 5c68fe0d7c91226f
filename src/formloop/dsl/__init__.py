"""formloop.dsl"""
