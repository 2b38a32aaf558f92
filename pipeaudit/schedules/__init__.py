"""pipeaudit.schedules"""
