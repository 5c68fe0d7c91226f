"""formloop.agent"""
